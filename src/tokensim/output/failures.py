"""What the command line says when it fails: one line, and the exit code.

Bad input (a TokensimError from the library, a flag typer refused, a file that cannot be read) exits 2 with
`field = value: expected ...` where the pieces are known; an interruption exits 1 or 130; anything else is a bug,
reported in one line with exit 1 (TOKENSIM_DEBUG=1 lets its traceback through).
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from typer.core import TyperGroup

from tokensim.errors import TokensimError

BAD_INPUT = 2
_CHOICE = re.compile(r"(?P<value>.+?) is not one of (?P<choices>.+?)\.?", re.S)
_NOT_A = re.compile(r"(?P<value>.+?) is not (?P<expected>an? valid .+?)\.?", re.S)     # click: 'x' is not a valid integer.


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def describe(exc: BaseException) -> tuple[str, int] | None:
    """(message, exit code) for an error the user can act on; None for a bug."""
    if isinstance(exc, TokensimError):
        return one_line(str(exc)), BAD_INPUT
    name = type(exc).__name__
    if name == "Abort":                                  # typer.Abort, or click's with an older typer
        return "aborted", 1
    if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):     # typer's (click's) usage errors
        return _usage(exc), int(exc.exit_code or BAD_INPUT)
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename!r}: " if exc.filename else ""
        return one_line(f"{where}{exc.strerror}"), BAD_INPUT
    return None


def _flag(exc: BaseException) -> str:
    hint = getattr(exc, "param_hint", None)
    if isinstance(hint, str) and hint:
        return hint.strip("'\"")
    param = getattr(exc, "param", None)
    opts = [o for o in getattr(param, "opts", []) or [] if o.startswith("--")] or list(getattr(param, "opts", []) or [])
    if opts:
        return max(opts, key=len)
    return str(getattr(param, "name", "") or "")


def _refused_input(exc: BaseException) -> object | None:
    """The value a typer built on pydantic refused (its ValidationError, the cause, carries it)."""
    errors = getattr(exc.__cause__ or exc.__context__, "errors", None)
    try:
        found = errors() if callable(errors) else None
    except Exception:
        return None
    return found[0].get("input") if isinstance(found, list) and found and isinstance(found[0], dict) else None


def _usage(exc: BaseException) -> str:
    """`--weights = 'int3': expected one of fp32, bf16, ...` for a refused choice; `--batch: 'x' is not a valid
    integer` for another refused value; otherwise typer's own message, with where to read the usage."""
    message = one_line(getattr(exc, "message", "") or "").removeprefix("Value error, ")
    flag = _flag(exc) if getattr(exc, "param", None) is not None else ""
    if flag and message:
        m = _CHOICE.fullmatch(message)
        if m:
            choices = ", ".join(c.strip().strip("'\"") for c in m.group("choices").split(","))
            return f"{flag} = {m.group('value')}: expected one of {choices}"
        m = _NOT_A.fullmatch(message)
        if m:
            return f"{flag} = {m.group('value')}: expected {m.group('expected')}"
        refused = _refused_input(exc)
        if refused is not None:
            return f"{flag} = {refused!r}: expected {message.removeprefix('Input should be ')}"
        if type(exc).__name__ == "BadParameter":
            return f"{flag}: {message}"
    text = one_line(exc.format_message()).removeprefix("Value error, ")     # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", "") or "tokensim"
    return f"{text} (see {command} --help)"


class OneLineErrors(TyperGroup):
    """A typer group whose every failure is one line on stderr (`describe`), whether the command runs as the console
    script, as `python -m tokensim` or under typer's CliRunner."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        try:
            rc = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except Exception as exc:
            if type(exc).__name__ == "NoArgsIsHelpError" and standalone_mode:   # `tokensim` alone: the help is the answer
                if getattr(exc, "message", ""):
                    sys.stdout.write(exc.message.rstrip() + "\n")            # type: ignore[attr-defined]
                sys.exit(getattr(exc, "exit_code", 2))
            failure = describe(exc)
            if not standalone_mode or (failure is None and os.environ.get("TOKENSIM_DEBUG")):
                raise
            message, code = failure or (f"internal error, please report it: {type(exc).__name__}: {exc} "
                                        "(TOKENSIM_DEBUG=1 shows the traceback)", 1)
            sys.stderr.write(f"error: {' '.join(message.split())}\n")
            sys.stderr.flush()
            sys.exit(code)
        if standalone_mode:
            sys.exit(rc if isinstance(rc, int) else 0)
        return rc


__all__ = ["BAD_INPUT", "OneLineErrors", "describe", "one_line"]
