"""Compare two runs' results beyond ``metrics.jsonl`` (:mod:`metrics_diff` compares the rows): the
warm start's and the final weights tensor by tensor, ``sft/sft.json`` (steps, accuracy, the check
history, settings and key), the pre-check's record (``preflight.json``, or ``headroom.json`` of
runs from before the preflight; absent in both runs counts as the same) and the accuracy of
``summary.json`` (overall and per task). Time fields are left out. Used with ``metrics_diff.py`` to show a restructuring kept a
run bit for bit (docs/results/refactor/)::

    python tools/run_diff.py RUN_A RUN_B

Prints one line per check; exits 1 when anything differs (a file missing in one run counts).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SUMMARY_TASK_COLUMNS = ("task", "n", "before", "after", "change")
SFT_KEYS = ("steps", "accuracy", "history", "sft_config", "key")


#: the pre-check's record before RL: the preflight's, or the headroom check's in older runs
PRECHECK_FILES = ("preflight.json", "headroom.json")


def _without_time(doc):
    """``doc`` less its wall-clock field (``settings.seconds`` of a preflight record)."""
    if isinstance(doc, dict) and isinstance(doc.get("settings"), dict):
        doc = {**doc, "settings": {k: v for k, v in doc["settings"].items() if k != "seconds"}}
    return doc


def _json(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def weights_equal(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    if not (a.exists() and b.exists()):
        return False
    wa, wb = load_file(str(a)), load_file(str(b))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def checks(a: Path, b: Path) -> list[tuple[str, bool]]:
    out = [(f"{sub}/model.safetensors", weights_equal(a / sub / "model.safetensors", b / sub / "model.safetensors"))
           for sub in ("sft", "final")]
    sa, sb = _json(a / "sft" / "sft.json"), _json(b / "sft" / "sft.json")
    out.append(("sft/sft.json " + ", ".join(SFT_KEYS),
                sa is not None and sb is not None and all(sa.get(k) == sb.get(k) for k in SFT_KEYS)))
    for name in PRECHECK_FILES:
        if (a / name).exists() or (b / name).exists():
            pa, pb = _without_time(_json(a / name)), _without_time(_json(b / name))
            out.append((f"{name} (but settings.seconds)", pa is not None and pa == pb))
    ja, jb = _json(a / "summary.json"), _json(b / "summary.json")

    def table(j):
        return [[r.get(c) for c in SUMMARY_TASK_COLUMNS] for r in j.get("per_task", [])]

    out.append(("summary.json accuracy and per-task " + ", ".join(SUMMARY_TASK_COLUMNS),
                ja is not None and jb is not None and ja["accuracy"] == jb["accuracy"] and table(ja) == table(jb)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    args = p.parse_args(argv)
    results = checks(Path(args.a), Path(args.b))
    for name, same in results:
        print(f"{name}: {'identical' if same else 'DIFFERENT'}")
    return 0 if all(same for _, same in results) else 1


if __name__ == "__main__":
    sys.exit(main())
