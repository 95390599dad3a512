"""Compare two runs' ``metrics.jsonl`` row by row, ignoring wall-time and throughput fields.

Used to show that a refactor is behaviour-preserving: the same config, seed and torch thread count
must give identical rows (``OMP_NUM_THREADS=1 grpolab train --set trainer.steps=20 --set
trainer.run_dir=A`` on the old code, the same with ``run_dir=B`` on the new one)::

    python tools/metrics_diff.py A/metrics.jsonl B/metrics.jsonl [--ignore PREFIX ...]

Prints every differing value and the count; exits 1 when anything differs. Keys present in only
one file count as differences unless ``--ignore``d (e.g. ``--ignore actor/`` for metric aliases
added later).
"""

from __future__ import annotations

import argparse
import json
import sys

VOLATILE = ("time/", "tokens_per_s", "throughput/")


def read_rows(path: str, ignore: tuple[str, ...]) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith(ignore)}
                for line in f if line.strip()]


def diff(a: list[dict], b: list[dict]) -> list[str]:
    out = [f"row count {len(a)} != {len(b)}"] if len(a) != len(b) else []
    for x, y in zip(a, b):
        for k in sorted(set(x) | set(y)):
            if x.get(k, "<missing>") != y.get(k, "<missing>"):
                out.append(f"step {x.get('step')}: {k}: {x.get(k, '<missing>')!r} != {y.get(k, '<missing>')!r}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--ignore", nargs="*", default=[], help="more key prefixes to leave out")
    args = p.parse_args(argv)
    ignore = VOLATILE + tuple(args.ignore)
    a, b = read_rows(args.a, ignore), read_rows(args.b, ignore)
    lines = diff(a, b)
    print(f"{len(a)} rows vs {len(b)} rows; {sum(map(len, a))} vs {sum(map(len, b))} values compared")
    print("\n".join(lines + [f"{len(lines)} differences"]))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
