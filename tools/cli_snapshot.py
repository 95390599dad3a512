"""A snapshot of the ``grpolab`` command line, to show that a restructure kept it: every parser's help
text (at two terminal widths), every action's declaration (options, dest, default, type, nargs,
choices, metavar, help, required) and what a set of argument lists parse to (or the one-line error
they give). Run it on the code before and after, then compare the two files::

    PYTHONPATH=<before>/src python tools/cli_snapshot.py before.json
    PYTHONPATH=<after>/src python tools/cli_snapshot.py after.json
    python tools/cli_snapshot.py --compare before.json after.json

The function each command runs is recorded by name apart (``runs``), and ``--compare`` reports it
separately: a restructure may rename it without changing the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys

#: argument lists whose parse (or error) the snapshot records: valid ones, values out of range and not numbers
PROBES = [
    ["train", "c.yaml", "--set", "a=1", "--set", "b=2", "--resume", "r", "--dry-run", "--overwrite"],
    ["sft", "--out", "o", "--debug"], ["--debug", "config"], ["config", "optim"], ["models"],
    ["models", "import", "x", "--out", "o", "--dtype", "int8"], ["eval"],
    *[["eval", "m", "--n", x] for x in ("0", "1", "x", "2.5")],
    *[["eval", "m", "--temperature", x] for x in ("0", "0.5", "nan", "-1")],
    *[["eval", "m", "--samples", x] for x in ("-1", "0")], ["eval", "m", "--max-new-tokens", "0"],
    *[["credit", "r", "--lam", x] for x in ("0", "1", "1.5", "x")],
    *[["preflight", "--budget", x] for x in ("-1", "0", "3")],
    ["preflight", "m", "--pilot", "3", "--no-readability", "--until-decided", "5", "--k", "4"],
    ["sweep", "--grid", "a=1,2", "--seeds", "2"], ["compare", "--vary", "a=1,2", "--baseline", "1"],
    ["diagnose", "r", "--base", "b"], ["nosuch"],
]
WIDTHS = (80, 200)


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(path, parser)`` of the parser and every subparser under it, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def _action(a: argparse.Action) -> dict:
    return {"cls": type(a).__name__, "opts": a.option_strings, "dest": a.dest, "default": repr(a.default),
            "type": getattr(a.type, "__name__", repr(a.type)), "nargs": a.nargs, "const": repr(a.const),
            "choices": sorted(a.choices) if isinstance(a.choices, (list, tuple)) else None,
            "required": a.required, "metavar": a.metavar, "help": a.help}


def _parse(argv: list[str]) -> dict:
    from grpolab.cli import build_parser

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            ns = vars(build_parser().parse_args(argv))
        result = {k: v for k, v in sorted(ns.items()) if not callable(v)}
    except SystemExit as e:
        result = {"exit": e.code}
    return {"argv": argv, "result": result, "stdout": out.getvalue(), "stderr": err.getvalue()}


def snapshot() -> dict:
    """The command line as data (see the module docstring)."""
    from grpolab.cli import build_parser

    helps: dict[str, dict[str, str]] = {}
    old = os.environ.get("COLUMNS")
    try:
        for width in WIDTHS:
            os.environ["COLUMNS"] = str(width)  # argparse reads the width when it formats
            for path, parser in _parsers(build_parser()):
                helps.setdefault(" ".join(path) or "grpolab", {})[str(width)] = parser.format_help()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old

    parsers = list(_parsers(build_parser()))
    return {"help": helps,
            "actions": {" ".join(path) or "grpolab": [_action(a) for a in p._actions] for path, p in parsers},
            "runs": {" ".join(path): getattr(p._defaults.get("func"), "__qualname__", None)
                     for path, p in parsers if "func" in p._defaults},
            "probes": [_parse(argv) for argv in PROBES]}


def compare(before: dict, after: dict) -> list[str]:
    """What differs between two snapshots, one line each; the functions the commands run are told apart."""
    out = []
    for key in ("help", "actions", "probes"):
        if before[key] != after[key]:
            keys = before[key].keys() | after[key].keys() if isinstance(before[key], dict) else range(
                max(len(before[key]), len(after[key])))
            for k in sorted(keys, key=str):
                get = (lambda d: d.get(k)) if isinstance(before[key], dict) else (lambda d: d[k] if k < len(d) else None)
                if get(before[key]) != get(after[key]):
                    out.append(f"{key} differ: {k}")
    if before["runs"] != after["runs"]:
        out.append("(the functions the commands run are named differently: "
                   f"{sum(before['runs'].get(k) != v for k, v in after['runs'].items())} of {len(after['runs'])})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="write the snapshot of the importable grpolab here (JSON)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two snapshots")
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(open(p, encoding="utf-8").read()) for p in args.compare)
        found = compare(before, after)
        for line in found:
            print(line)
        same = not [x for x in found if not x.startswith("(")]
        print(f"command line identical: {len(before['help'])} parsers' help at widths {list(WIDTHS)}, "
              f"{sum(map(len, before['actions'].values()))} actions, {len(before['probes'])} argument lists"
              if same else f"{len(found)} difference(s)")
        return 0 if same else 1
    if not args.out:
        ap.error("give OUT or --compare BEFORE AFTER")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(snapshot(), f, indent=1, sort_keys=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
