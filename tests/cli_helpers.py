"""Helpers for tests that drive ``grpolab`` through its command line on a tiny model."""

from grpolab.cli import main


def tiny_run(steps: int) -> list[str]:
    """``--set`` values of a tiny arith run of ``steps`` steps (no warm start, no preflight, a checkpoint
    every step, evaluated at the end): seconds per step on a CPU."""
    return [
        "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
        "task.options.max_digits=1", "task.options.max_terms=2", "task.n_train=16", "task.n_eval=4",
        "sft.enabled=no", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
        f"trainer.steps={steps}", "trainer.save_every=1", f"trainer.eval_every={steps}", "trainer.preflight=false",
        "log.progress=false", "log.plots=false", "log.tensorboard=false",
    ]


def sets(*values: str) -> list[str]:
    """``["--set", v1, "--set", v2, ...]``."""
    return sum([["--set", v] for v in values], [])


def one_error(capsys, argv: list[str], *needles: str) -> str:
    """Run ``grpolab ARGV``: it must exit 2 with exactly one ``error: ...`` line holding every needle."""
    capsys.readouterr()
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), (rc, err)
    for n in needles:
        assert n in err[0], err[0]
    return err[0]
