"""The README's Python examples run as written, and its set-up commands are the ones CI runs."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python examples"
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), ns)
    assert abs(ns["total"].item() - ns["policy_loss"](
        ns["logp"], ns["old_logp"], ns["adv"], ns["mask"], ratio="token", weights=ns["W"])[0].item()) < 1e-6


def test_readme_top_has_the_two_setup_commands():
    text = README.read_text()
    first = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert len(first) == 2
    assert first[0].endswith("grpolab train")
    assert "pytest" in first[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -q -c constraints-cpu.txt -e ".[test]"' in ci
    assert 'pytest -m "not slow"' in ci and 'pytest -m "not slow"' in first[1]
