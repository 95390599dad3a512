"""The "json_schema" verifier: parse the completion's JSON and validate it with ``jsonschema``.

Reference: a JSON Schema (a dict, or its JSON text -- the form a dataset column holds). The
validator class follows the schema's ``$schema`` (default: Draft 2020-12); an invalid schema is a
verifier error (raised -> ``info["error"]`` in ``safe_score``).

Completion: the first ```` ```json ```` fenced block that parses, else the first JSON object or
array in the text (``json.JSONDecoder.raw_decode`` from each ``{`` / ``[`` in turn; at most
:data:`MAX_CANDIDATES` starts are tried). No JSON -> 0.0.

Score: 1.0 when the document is valid. Otherwise 0.0, unless ``partial=True``, where for an
object schema validated against an object document the score is the fraction of passed checks:

* one check per top-level key named in the schema's ``properties`` or ``required`` (and per
  top-level key any error points into): it passes when no validation error lies at or below that
  key and, for a required key, the key is present;
* one more check for everything else at the top level (``additionalProperties``,
  ``minProperties``, ``type``, ...): it passes when no such top-level error exists.

``partial_score = passed / (keys + 1)``; an invalid document always scores below 1. A document of
the wrong top-level type, or a non-object schema, scores 0.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grpolab.rewards.base import RewardResult, register_reward

__all__ = ["MAX_CANDIDATES", "extract_json", "json_schema_reward"]

#: Most ``{`` / ``[`` positions tried when looking for the JSON document in free text.
MAX_CANDIDATES = 200

_FENCE_RE = re.compile(r"```[ \t]*(json)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_MISSING = object()


def extract_json(completion: str) -> tuple[Any, str]:
    """``(document, method)``: method "fence", "inline" or "none" (document is then None)."""
    decoder = json.JSONDecoder()
    for m in _FENCE_RE.finditer(completion):
        text = m.group(2).strip()
        try:
            return decoder.decode(text), "fence"
        except (json.JSONDecodeError, RecursionError):
            continue
    tried = 0
    for m in re.finditer(r"[\[{]", completion):
        tried += 1
        if tried > MAX_CANDIDATES:
            break
        try:
            doc, _end = decoder.raw_decode(completion, m.start())
            return doc, "inline"
        except (json.JSONDecodeError, RecursionError):
            continue
    return None, "none"


def _load_schema(reference: Any) -> dict | bool:
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the json_schema reference is a string that is not JSON: {exc}") from exc
    if not isinstance(reference, (dict, bool)):
        raise TypeError(
            f"the json_schema reward needs a JSON Schema (dict), got {type(reference).__name__}"
        )
    return reference


def _validator_for(schema):
    try:
        import jsonschema
    except ImportError as exc:
        raise ImportError("the json_schema reward needs jsonschema: pip install jsonschema") from exc
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)  # raises SchemaError: a verifier error, not the model's
    return cls(schema)


@register_reward("json_schema")
def json_schema_reward(completion: str, reference: Any, *, partial: bool = False) -> RewardResult:
    """1.0 for a valid document; 0.0 or the partial score otherwise (see module doc).

    ``info``: ``method`` (how the JSON was found), ``valid``, ``errors`` (count),
    ``messages`` (first few), and with ``partial`` ``checks`` / ``passed``.
    """
    schema = _load_schema(reference)
    validator = _validator_for(schema)
    doc, method = extract_json(completion)
    info: dict[str, Any] = {"method": method, "valid": False}
    if method == "none":
        return RewardResult(0.0, info)
    errors = list(validator.iter_errors(doc))
    info["errors"] = len(errors)
    info["messages"] = [e.message[:200] for e in errors[:5]]
    if not errors:
        info["valid"] = True
        return RewardResult(1.0, info)
    if not partial or not isinstance(schema, dict) or not isinstance(doc, dict):
        return RewardResult(0.0, info)
    props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
    required = [k for k in schema.get("required", []) if isinstance(k, str)]
    keys = set(props) | set(required)
    failed: set[str] = {k for k in required if k not in doc}
    other = False
    for e in errors:
        path = list(e.absolute_path)
        if path and isinstance(path[0], str):
            keys.add(path[0])
            failed.add(path[0])
        elif e.validator != "required":
            other = True
    checks = len(keys) + 1
    passed = len(keys - failed) + (0 if other else 1)
    info["checks"], info["passed"] = checks, passed
    return RewardResult(passed / checks, info)
