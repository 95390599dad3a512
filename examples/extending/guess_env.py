"""A new environment: "guess", find a hidden digit from higher/lower hints (docs/extending.md,
"An environment").

An environment plays one episode over text: ``reset(item)`` returns the first observation (the
prompt), ``step(action)`` takes one model turn (without its EOS) and returns a
:class:`grpolab.envs.StepResult` (observation, reward, done, info). An episode::

    prompt:       "guess 0-9\\n"
    model:        "guess(4)"   <eos>
    observation:  "\\n=higher\\n"
    model:        "guess(7)"   <eos>
    observation:  "\\n=lower\\n"
    model:        "guess(5)"   <eos>       -> done, reward 1.0

The environment is registered with :func:`grpolab.envs.register_env`; a task makes its items,
each carrying a scripted expert's transcript (``meta["transcript"]``), from which the warm start
learns the actions with the observations masked out. ``env.name: guess`` with ``task.name:
guess`` trains on it::

    python examples/extending/guess_env.py runs/guess trainer.steps=50
"""

from __future__ import annotations

import random
import sys

from grpolab.envs import StepResult, format_observation, make_env, parse_call, register_env, run_script
from grpolab.tasks import ProceduralTask, TaskItem, register_task


@register_env("guess")
class GuessEnv:
    """Guess the item's digit (``item.reference``); every wrong guess gets "higher" or "lower"."""

    def __init__(self) -> None:
        self.secret: int | None = None

    def reset(self, item) -> str:
        self.secret = int(item.reference)
        return item.prompt

    def step(self, action: str) -> StepResult:
        if self.secret is None:
            raise RuntimeError("call reset(item) before step()")
        call = parse_call(action)
        if call is None or call[0] != "guess" or not call[1].strip().isdigit():
            # not an action: say so and let the episode go on (counted as invalid)
            return StepResult(format_observation("error: write guess(D)"), info={"invalid": True})
        guess = int(call[1])
        if guess == self.secret:
            return StepResult("", reward=1.0, done=True)
        return StepResult(format_observation("higher" if guess < self.secret else "lower"))


def expert_actions(secret: int) -> list[str]:
    """Binary search over 0..9: at most 4 guesses."""
    lo, hi, actions = 0, 9, []
    while True:
        mid = (lo + hi) // 2
        actions.append(f"guess({mid})")
        if mid == secret:
            return actions
        lo, hi = (mid + 1, hi) if mid < secret else (lo, mid - 1)


@register_task("guess")
class GuessTask(ProceduralTask):
    """Items for the "guess" environment: a hidden digit and the expert's transcript.

    Ten digits are a small prompt space, so the prompt also names an episode number; the
    environment ignores it (it only makes prompts unique for the train/eval split).
    """

    name = "guess"

    def generate(self, rng: random.Random) -> TaskItem:
        secret = rng.randint(0, 9)
        item = TaskItem(prompt=f"game {rng.randint(0, 99999)}: guess 0-9\n", reference=str(secret),
                        reward="exact", meta={"env": "guess"})
        transcript, ret, done = run_script(make_env("guess"), item, expert_actions(secret))
        assert done and ret == 1.0, (secret, transcript)
        item.meta["transcript"] = transcript
        item.demonstration = item.privileged = "".join(text for _, text in transcript)
        return item


def main(argv: list[str]) -> int:
    """``guess_env.py RUN_DIR [section.key=value ...]``: RL in the guess environment (tiny model)."""
    from grpolab.config import load_config
    from grpolab.train import train

    run_dir, *overrides = argv or ["runs/guess"]
    cfg = load_config(overrides=["task.name=guess", "env.name=guess", "env.max_turns=5", "env.max_total_tokens=96",
                                 "env.max_turn_tokens=12", f"trainer.run_dir={run_dir}", "trainer.steps=50",
                                 *overrides])
    result = train(cfg)
    print(f"guess: held-out success {result.start_accuracy:.3f} -> {result.final_accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
