"""tools/cli_snapshot.py: the same command line compares identical (a renamed run function is told apart),
and a changed help text, default or parse is reported."""

import copy
import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("cli_snapshot", Path(__file__).parents[2] / "tools" / "cli_snapshot.py")
cs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cs)


def test_the_same_command_line_is_identical_and_a_change_is_found(tmp_path, capsys):
    snap = cs.snapshot()
    assert set(snap["help"]) >= {"grpolab", "train", "preflight", "models", "models import"}
    assert "usage: grpolab preflight" in snap["help"]["preflight"]["80"]
    assert snap["help"]["preflight"]["80"] != snap["help"]["preflight"]["200"]  # two widths, two wrappings
    probe = next(p for p in snap["probes"] if p["argv"] == ["eval", "m", "--n", "0"])
    assert probe["result"] == {"exit": 2} and "--n: 0 is not allowed" in probe["stderr"]
    (tmp_path / "a.json").write_text(json.dumps(snap))
    renamed = copy.deepcopy(snap)
    renamed["runs"]["train"] = "somewhere_else"
    (tmp_path / "b.json").write_text(json.dumps(renamed))
    assert cs.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "named differently: 1 of" in capsys.readouterr().out
    changed = copy.deepcopy(snap)
    changed["help"]["sft"]["80"] = changed["help"]["sft"]["80"].replace("warm", "cold")
    changed["actions"]["eval"][-1]["default"] = "4"
    (tmp_path / "c.json").write_text(json.dumps(changed))
    assert cs.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 1
    assert capsys.readouterr().out.splitlines()[:2] == ["help differ: sft", "actions differ: eval"]
