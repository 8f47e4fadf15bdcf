"""Typed fields for the input models, and pydantic's ValidationError turned into one TokensimError line.

Every physical quantity is a finite number in SI units with a range (`Number`), every count an integer that
is an integer (`Count`: not 2.5, not 1e400, not Infinity, not true), every text bounded in length. The models
are strict (no "8" for 8, no 1 for true) and forbid unknown fields, so a misspelt field is named, not ignored.

The message: `<file>: <dotted.field> = <value>: expected <what>`, for the first error, plus "(and N more)".
"""
from __future__ import annotations

import difflib
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic_core import PydanticCustomError, core_schema

from tokensim.errors import TokensimError

MAX_TEXT_CHARS = 100_000       # notes and sources; names are shorter
MAX_NAME_CHARS = 500
_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")   # YAML 1.1 reads 96.0e9 as a string

M = TypeVar("M", bound=BaseModel)


class InputModel(BaseModel):
    """Base of every file model: strict types, unknown fields refused, immutable once read."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, protected_namespaces=())


def _fail(expected: str) -> PydanticCustomError:
    return PydanticCustomError("tokensim", "{expected}", {"expected": expected})


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


MISSING: Any = _Missing()       # the value of a field that is not there, for field_error


def field_error(field: str | None, value: Any, expected: str) -> PydanticCustomError:
    """For a model validator: an error naming one of the model's fields (None: the table itself) and its value."""
    ctx = {"expected": expected, "value": value}
    if field is not None:
        ctx["field"] = field
    return PydanticCustomError("tokensim", "{expected}", ctx)


def _range_text(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    parts = [f"> {gt:g}" if gt is not None else "", f">= {ge:g}" if ge is not None else "",
             f"< {lt:g}" if lt is not None else "", f"<= {le:g}" if le is not None else ""]
    return " and ".join(p for p in parts if p)


@dataclass(frozen=True)
class Number:
    """`Annotated[float, Number("bytes per chip", gt=0)]`: a finite float in `unit` within the bounds.
    `text_ok`: a numeric string is read as its number (YAML 1.1 reads `96.0e9`, with no sign in the exponent,
    as text). Booleans, NaN, infinities and integers beyond the float range are refused."""

    unit: str
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    text_ok: bool = False

    @property
    def expected(self) -> str:
        return f"a finite number {_range_text(self.gt, self.ge, self.lt, self.le)} ({self.unit})"

    def check(self, value: Any) -> float:
        if isinstance(value, str) and self.text_ok and _NUMBER_TEXT.fullmatch(value.strip()):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(self.expected)
        try:
            x = float(value)
        except OverflowError:                    # an integer beyond the float range
            raise _fail(self.expected) from None
        if not math.isfinite(x) or (self.gt is not None and not x > self.gt) or (self.ge is not None and not x >= self.ge) \
                or (self.lt is not None and not x < self.lt) or (self.le is not None and not x <= self.le):
            raise _fail(self.expected)
        return x

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        inner = core_schema.float_schema(gt=self.gt, ge=self.ge, lt=self.lt, le=self.le, allow_inf_nan=False)
        return core_schema.no_info_before_validator_function(self.check, inner)

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        return {**handler(schema), "description": self.expected}


@dataclass(frozen=True)
class Count:
    """`Annotated[int, Count("chips", le=1_000_000)]`: an integer number of `what` in [ge, le]; 8.0 is read as
    8; 8.5, 1e400, Infinity and true are refused."""

    what: str
    ge: int = 1
    le: int = 2**31

    @property
    def expected(self) -> str:
        return f"an integer >= {self.ge:,} and <= {self.le:,} ({self.what})"

    def check(self, value: Any) -> int:
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not self.ge <= value <= self.le:
            raise _fail(self.expected)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, core_schema.int_schema(ge=self.ge, le=self.le))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        return {**handler(schema), "description": self.expected}


def _no_control_characters(value: str) -> str:
    if any(ord(c) < 32 and c not in "\t\n\r" for c in value):
        raise _fail("text without control characters")
    return value


def _plain_name(value: str) -> str:
    if not value.strip() or any(ord(c) < 32 for c in value):
        raise _fail("a non-empty name on one line, without control characters")
    return value


Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS, description="text"), AfterValidator(_no_control_characters)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, description="a name"), AfterValidator(_plain_name)]


# ------------------------------------------------------------------ ValidationError -> one line

def show(value: Any) -> str:
    """A short, safe rendering of a bad value (huge integers and long texts cut)."""
    if isinstance(value, (bool, _Missing)) or value is None:
        return repr(value)
    if isinstance(value, int):
        digits = int(value.bit_length() * 0.30103) + 1
        return repr(value) if digits <= 30 else f"an integer of about {digits:,} digits"
    if isinstance(value, (list, tuple, dict)):
        kind = type(value).__name__
        n = len(value)
        if n > 4 or any(isinstance(v, (list, tuple, dict)) for v in (value.values() if isinstance(value, dict) else value)):
            return f"a {kind} of {n} entr{'y' if n == 1 else 'ies'}" if kind != "dict" else \
                f"a table of {n} field{'' if n == 1 else 's'}"
        parts = [f"{show(k)}: {show(v)}" for k, v in value.items()] if isinstance(value, dict) else [show(v) for v in value]
        text = ", ".join(parts)
        return ("{" + text + "}") if isinstance(value, dict) else ("[" + text + "]")
    try:
        text = repr(value)
    except Exception:                            # noqa: BLE001 - a value whose repr fails is still reported
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,80}")


def _dotted(loc: tuple) -> str:
    """('memory', 0, 'tier') -> memory[0].tier; a key that is not a plain word is quoted: links[0]['a b']."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"[{show(str(part))}]"
    return out


def _unwrap(tp: Any) -> Any:
    """The type inside Annotated/Optional, or the item type of a list or dict."""
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        else:
            return tp


def _walk(model: Any, loc: tuple) -> tuple[Any, Any]:
    """(the model class holding the last field of `loc`, that field's FieldInfo), either None when unknown."""
    owner, info = model, None
    for part in loc:
        tp = _unwrap(owner) if owner is not None else None
        origin = typing.get_origin(tp)
        if isinstance(part, int) and origin in (list, tuple):
            owner, info = typing.get_args(tp)[0], info
            continue
        if isinstance(part, str) and origin is dict:
            owner, info = typing.get_args(tp)[1], info
            continue
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str) and part in tp.model_fields:
            info = tp.model_fields[part]
            owner = info.annotation
            continue
        return None, None
    return owner, info


def _description(info: Any) -> str | None:
    """What a field expects: its description, or that of the Number/Count it is annotated with."""
    if info.description:
        return info.description
    stack = list(info.metadata) + [info.annotation]
    while stack:
        item = stack.pop(0)
        if isinstance(item, (Number, Count)):
            return item.expected
        if typing.get_origin(item) is Annotated:
            stack.extend(item.__metadata__)
        elif typing.get_origin(item) in (typing.Union, types.UnionType):
            stack.extend(typing.get_args(item))
    return None


def _fields_of(model: Any, loc: tuple) -> list[str]:
    owner, _ = _walk(model, loc)
    tp = _unwrap(owner) if owner is not None else None
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


_TYPE_WORDS = {"string_type": "a string", "bool_type": "true or false", "list_type": "a list",
               "model_type": "a table of fields", "dict_type": "a table of fields", "model_attributes_type": "a table of fields",
               "int_type": "an integer", "float_type": "a number", "invalid_key": "text keys",
               "string_too_short": "a non-empty string"}


def _expected(err: Any, model: Any) -> str:
    kind, ctx, loc = err["type"], err.get("ctx") or {}, err["loc"]
    if kind == "tokensim":
        return str(ctx.get("expected", err["msg"]))
    if kind == "extra_forbidden":
        known = _fields_of(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"one of the fields {', '.join(known)}{hint}" if known else "no such field"
    _, info = _walk(model, loc)
    described = _description(info) if info is not None and not isinstance(loc[-1], int) else None
    if kind == "missing":
        return f"{described or 'a value'} (the field is missing)"
    if kind == "literal_error":
        return f"one of {ctx.get('expected', '')}"
    if kind in ("too_long", "too_short"):
        bound = ctx.get("max_length" if kind == "too_long" else "min_length")
        return f"{'at most' if kind == 'too_long' else 'at least'} {bound:,} entries" + (f" ({described})" if described else "")
    if kind == "string_too_long":
        return f"a text of at most {ctx.get('max_length', 0):,} characters"
    if described and kind in _TYPE_WORDS:
        return described
    return _TYPE_WORDS.get(kind) or err["msg"][:1].lower() + err["msg"][1:]


def message(exc: ValidationError, model: Any, origin: str, prefix: str = "") -> str:
    errors = exc.errors(include_url=False)
    err = errors[0]
    ctx = err.get("ctx") or {}
    loc = tuple(err["loc"]) + ((ctx["field"],) if "field" in ctx else ())
    field = _dotted(loc)
    if prefix:
        field = prefix + ("." if field and not field.startswith("[") else "") + field
    field = field or "(top level)"
    value = "(missing)" if err["type"] == "missing" else show(ctx["value"] if "value" in ctx else err["input"])
    if err["type"] == "extra_forbidden":
        value = f"{value} (unknown field)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    head = f"{origin}: " if origin else ""
    return f"{head}{field} = {value}: expected {_expected(err, model)}{more}"


def validate(model: type[M], data: Any, origin: str, prefix: str = "") -> M:
    """`data` as a `model`, or one TokensimError line naming `origin` (a file), the field, the value and what
    was expected. `prefix` is put before the field (a table's place in its file)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TokensimError(message(exc, model, origin, prefix)) from None
    except RecursionError:               # unreachable for data read by inputs.files (its depth is bounded)
        raise TokensimError(f"{origin}: nested too deeply") from None


__all__ = ["InputModel", "Number", "Count", "Text", "Name", "MISSING", "field_error", "show", "message", "validate",
           "MAX_TEXT_CHARS", "MAX_NAME_CHARS"]
