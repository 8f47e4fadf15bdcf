"""Reading the files a user hands tokensim: one safe reader (files), a typed model per kind of file
(hardware_file, scenario_file, session_file) that checks every field's type, range and unit once, and the
JSON Schema of each (schema). Every failure is one TokensimError naming the file, the field, the value and
what was expected."""
from tokensim.inputs.files import read_json_lines, read_mapping
from tokensim.inputs.schema import json_schema

__all__ = ["read_mapping", "read_json_lines", "json_schema"]
