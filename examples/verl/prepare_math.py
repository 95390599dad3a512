"""MATH (the lighteval copy) -> the parquet files verl's RL dataset reads.

Each row: ``data_source`` (a name verl's default reward routes to its MATH verifier), ``prompt``
(a one-message chat), ``ability``, ``reward_model = {"style": "rule", "ground_truth": <boxed answer>}``
and ``extra_info``. Run once, on a machine with internet access (or a local copy via --source)::

    python examples/verl/prepare_math.py --out ~/data/math
"""

from __future__ import annotations

import argparse
import os

INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
SOURCE = "DigitalLearningGmbH/MATH-lighteval"


def boxed_answer(solution: str) -> str:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in a MATH solution."""
    for tag in ("\\boxed{", "\\fbox{"):
        start = solution.rfind(tag)
        if start >= 0:
            i, depth = start + len(tag), 1
            while i < len(solution) and depth:
                depth += {"{": 1, "}": -1}.get(solution[i], 0)
                i += 1
            if depth == 0:
                return solution[start + len(tag): i - 1]
    raise ValueError("solution has no \\boxed{...} answer")


def to_row(example: dict, index: int, split: str) -> dict:
    return {
        "data_source": SOURCE,
        "prompt": [{"role": "user", "content": example["problem"] + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": boxed_answer(example["solution"])},
        # the worked solution is the privileged context RLSD/GEAR's teacher would read
        "extra_info": {"split": split, "index": index, "solution": example["solution"]},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.expanduser("~/data/math"))
    p.add_argument("--source", default=SOURCE, help="dataset name or local path for datasets.load_dataset")
    a = p.parse_args(argv)
    from datasets import load_dataset

    os.makedirs(a.out, exist_ok=True)
    ds = load_dataset(a.source)
    for split in ("train", "test"):
        rows = ds[split].map(lambda ex, i, split=split: to_row(ex, i, split), with_indices=True,
                             remove_columns=ds[split].column_names)
        path = os.path.join(a.out, f"{split}.parquet")
        rows.to_parquet(path + ".tmp")
        os.replace(path + ".tmp", path)  # atomic: a half-written file never carries the final name
        print(f"{split}: {len(rows)} rows -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
