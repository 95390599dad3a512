"""The web example's episode budgets never cut off the expert: a perfect policy is never truncated.

``examples/web_agent.yaml`` caps each model turn (``env.max_turn_tokens``), the whole response
(``env.max_total_tokens``, model + observation tokens) and the turns (``env.max_turns``). If a
family's expert episode did not fit, its successes would be impossible and RL would see reward 0
for the right behaviour. Measured with the tiny model's tokenizer, the way
:func:`grpolab.rollout.run_episodes` counts (each action + its EOS, each observation's tokens).
"""

from pathlib import Path

from grpolab.config import load_config
from grpolab.models import build_tokenizer
from grpolab.tasks import get_task
from grpolab.tasks.web import FAMILIES
from grpolab.train.sft import encode_transcript


def test_expert_episodes_fit_the_example_budgets():
    env = load_config(Path(__file__).resolve().parents[2] / "examples" / "web_agent.yaml").env
    tok = build_tokenizer()
    items = get_task("web", seed=0).items("train", 300) + get_task("web", seed=0).items("eval", 50)
    longest = {f: 0 for f in FAMILIES}
    for it in items:
        acts = [text for role, text in it.meta["transcript"] if role == "act"]
        ids, labels = encode_transcript(tok, it.meta["transcript"])
        # every action + EOS fits one model turn, the episode fits the turn and token budgets
        assert max(len(tok(a, add_special_tokens=False)["input_ids"]) + 1 for a in acts) <= env.max_turn_tokens
        assert len(acts) <= env.max_turns
        # run_episodes drops an observation (and ends the episode) once the response would reach
        # max_total_tokens, so the last action must end strictly below it
        assert len(ids) < env.max_total_tokens, it.prompt
        assert ids[-1] == tok.eos_token_id and labels[-1] == tok.eos_token_id
        longest[it.meta["family"]] = max(longest[it.meta["family"]], len(ids))
    # login with a password (type, type, click, done) is the longest family
    assert max(longest, key=longest.get) == "login"
