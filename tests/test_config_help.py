"""Every config key's help lives once, on its field: grpolab.config_help, `grpolab config` and the TRL
adapter read it from there, and config.py has no second home for it (no comment on or above a field)."""

import ast
import dataclasses
import io
import tokenize
from pathlib import Path

import grpolab.config as config_module
from grpolab.config import Config
from grpolab.config_help import KEY_HELP, KEY_MORE, key_fields

SECTIONS = {f.default_factory.__name__ for f in dataclasses.fields(Config)}


def test_every_key_has_its_help_on_the_field_and_the_tables_are_read_from_it():
    fields = key_fields()
    assert len(fields) > 100 and set(KEY_HELP) == set(fields) == set(KEY_MORE)
    for key, f in fields.items():
        meaning = f.metadata.get("help", "")
        assert meaning and "\n" not in meaning, key                       # one line
        assert KEY_HELP[key] == (f.metadata["form"], meaning), key
        assert KEY_MORE[key] == f.metadata["more"], key


def test_the_command_prints_the_field_help():
    from grpolab.config_help import key_rows

    rows = {key: meaning for key, _, _, meaning in key_rows()}
    assert rows == {k: m for k, (_, m) in KEY_HELP.items()}


def test_trl_arguments_carry_the_same_help():
    import pytest

    trl = pytest.importorskip("grpolab.integrations.trl.trainer")
    args = {f.name: f for f in dataclasses.fields(trl.GrpolabGRPOConfig)}
    for key, (_, meaning) in KEY_HELP.items():
        if key.startswith("credit."):
            name = trl.CREDIT_PREFIX + key.split(".", 1)[1]
            assert args[name].metadata["help"] == meaning, name


def test_config_py_documents_a_key_nowhere_but_on_its_field():
    src = Path(config_module.__file__).read_text(encoding="utf-8")
    tree = ast.parse(src)
    comments = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in SECTIONS):
        fields = [s for s in cls.body if isinstance(s, ast.AnnAssign) and "ClassVar" not in ast.unparse(s.annotation)]
        for st in fields:
            assert ast.unparse(st.value.func) == "_key", (cls.name, st.target.id)
            lines = set(range(st.lineno - 1, st.end_lineno + 1))                 # on it, or the line above
            assert not lines & comments, f"{cls.name}.{st.target.id}: a comment documents it; use _key(more=...)"
        doc = ast.get_docstring(cls) or ""
        named = [st.target.id for st in fields if f"``{st.target.id}``:" in doc]
        assert named == [], f"{cls.name}'s docstring documents {named}; their help belongs on the fields"
