"""The "json_schema" verifier: extraction, validation, the partial-credit rule."""

from __future__ import annotations

import json

import pytest

from grpolab.rewards import extract_json, safe_score, score

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "completion, doc, method",
    [
        ('```json\n{"a": 1}\n```', {"a": 1}, "fence"),
        ('```json\nnot json\n```\nthen {"b": [1, 2]} trailing', {"b": [1, 2]}, "inline"),
        ('Answer: [1, {"c": null}] done', [1, {"c": None}], "inline"),
        ("a {broken then {\"ok\": true}", {"ok": True}, "inline"),
        ("no json here", None, "none"),
    ],
)
def test_extract_json(completion, doc, method):
    assert extract_json(completion) == (doc, method)


def test_valid_and_invalid_documents():
    good = json.dumps({"name": "ada", "age": 36, "tags": ["x"]})
    assert score("json_schema", good, SCHEMA).score == 1.0
    assert score("json_schema", f"Here you go:\n```json\n{good}\n```", json.dumps(SCHEMA)).score == 1.0
    bad = json.dumps({"name": "ada", "age": -1})
    res = score("json_schema", bad, SCHEMA)
    assert res.score == 0.0 and res.info["errors"] == 1 and not res.info["valid"]
    assert score("json_schema", "nothing", SCHEMA).score == 0.0


def test_partial_credit_rule_by_hand():
    # keys checked: name, age, tags (3) + one top-level check = 4 checks.
    # doc: name ok, age wrong type, tags missing (optional: ok), an extra key "x"
    # (additionalProperties: a top-level error) -> passed = name + tags = 2 of 4.
    doc = json.dumps({"name": "ada", "age": "old", "x": 1})
    res = score("json_schema", doc, SCHEMA, partial=True)
    assert res.score == 0.5 and (res.info["checks"], res.info["passed"]) == (4, 2)
    # required "age" missing, everything else fine -> 3 of 4
    assert score("json_schema", '{"name": "ada"}', SCHEMA, partial=True).score == 0.75
    # nested error inside tags -> tags fails -> 3 of 4
    doc = json.dumps({"name": "a", "age": 1, "tags": ["ok", 3]})
    assert score("json_schema", doc, SCHEMA, partial=True).score == 0.75
    # wrong top-level type -> 0 even with partial credit
    assert score("json_schema", "[1, 2]", SCHEMA, partial=True).score == 0.0
    # a valid document still scores exactly 1
    assert score("json_schema", '{"name": "a", "age": 1}', SCHEMA, partial=True).score == 1.0


def test_bad_schema_is_a_verifier_error():
    res = safe_score("json_schema", "{}", {"type": "no-such-type"})
    assert res.score == 0.0 and "SchemaError" in res.info["error"]
    assert "TypeError" in safe_score("json_schema", "{}", 42).info["error"]
    assert "ValueError" in safe_score("json_schema", "{}", "{not json").info["error"]


def test_deeply_nested_input_does_not_crash():
    res = safe_score("json_schema", "[" * 100_000 + "]" * 100_000, {"type": "array"})
    assert res.score in (0.0, 1.0) and "error" not in res.info
