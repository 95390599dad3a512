"""A reward written outside grpolab: shorter answers score higher (docs/extending.md, "A reward").

A reward is a plain function ``fn(completion, reference, **options)`` returning a
``RewardResult`` (or a bare number). This one knows nothing about correctness; combine it with a
verifier in the config, so that it only breaks ties between answers of equal correctness::

    task:
      options:
        reward:
          - {name: math, weight: 1.0}
          - {name: "brevity:brevity", weight: 0.2, options: {max_chars: 20}}

Train with it (the module must be importable: on ``PYTHONPATH`` or installed)::

    PYTHONPATH=examples/extending grpolab train examples/extending/brevity.yaml
"""

from grpolab.rewards import RewardResult


def brevity(completion: str, reference: str, *, max_chars: int = 20) -> RewardResult:
    """1.0 for an empty completion, falling linearly to 0.0 at ``max_chars`` characters and beyond."""
    if max_chars <= 0:
        raise ValueError(f"max_chars must be > 0, got {max_chars}")  # scored 0 with info["error"]
    n = len(completion)
    return RewardResult(max(0.0, 1.0 - n / max_chars), {"chars": n})
