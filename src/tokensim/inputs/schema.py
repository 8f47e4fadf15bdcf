"""JSON Schema of each kind of user file, generated from the models that check it (so the two cannot drift)."""
from __future__ import annotations

from typing import Any

from tokensim.errors import bad_value

KINDS = ("scenario", "hardware", "session")


def _model(kind: str):
    if kind == "scenario":
        from tokensim.inputs.scenario_file import ScenarioFile
        return ScenarioFile
    if kind == "hardware":
        from tokensim.inputs.hardware_file import HardwareFile
        return HardwareFile
    if kind == "session":
        from tokensim.inputs.session_file import SessionFile
        return SessionFile
    raise bad_value("kind", kind, f"one of {', '.join(KINDS)}")


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario, hardware or session file, as a plain dict."""
    schema = _model(kind).model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"tokensim {kind} file"
    if kind == "session":
        schema["description"] = ("A session as one TOML/YAML/JSON document with [[calls]]; a JSONL session has one "
                                 "CallEntry object per line (see $defs.CallEntry).")
    return schema


__all__ = ["json_schema", "KINDS"]
