"""The one error type users see: it names the field, the value and what was expected."""
from __future__ import annotations


class TokensimError(ValueError):
    """Bad input or an impossible request. The CLI prints the message and exits with code 2."""


def bad_value(field: str, value: object, expected: str) -> TokensimError:
    """Build the standard message: `field = value: expected ...`."""
    return TokensimError(f"{field} = {value!r}: expected {expected}")


def require(condition: bool, field: str, value: object, expected: str) -> None:
    """Raise `bad_value(...)` unless `condition` holds (input checks; never `assert`)."""
    if not condition:
        raise bad_value(field, value, expected)
