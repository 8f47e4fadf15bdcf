"""Writing output files so that none is ever half-written and nothing is left behind on failure.

Every file-writing command (`--plot`, `report -o`, `plan --csv`, `fit -o`) goes through here: each file is
written to a temporary file in the target's own folder, flushed to disk, then renamed over the target. A
group of files (the PNG and SVG of a plot, the several plots of `predict --plot`) is renamed only once all
of them are written; if anything fails first, every temporary file is removed and no target is touched.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tokensim.errors import TokensimError, bad_value


def check_target(path: str | os.PathLike[str], field: str) -> Path:
    """`path` as a Path, or a TokensimError naming `field` when a file cannot be written there:
    the path is a folder, its folder does not exist or is not a folder, or that folder is not writable."""
    raw = os.fspath(path)
    target = Path(raw)
    if not raw or raw.endswith(("/", os.sep)) or target.is_dir() or target.name in ("", ".", ".."):
        raise bad_value(field, raw, "a file path, not a folder")
    parent = target.parent
    if not parent.exists():
        raise bad_value(field, raw, f"a file in an existing folder ({str(parent)!r} does not exist)")
    if not parent.is_dir():
        raise bad_value(field, raw, f"a file in a folder ({str(parent)!r} is not a folder)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise bad_value(field, raw, f"a file in a folder you can write to ({str(parent)!r} is not writable)")
    return target


def _file_mode() -> int:
    """The mode a plain `open(path, "w")` would give: 0o666 less the umask (mkstemp makes files private)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Outputs:
    """Temporary files opened by `atomic_outputs`, renamed over their targets together at the end."""

    def __init__(self) -> None:
        self._pending: list[tuple[IO[Any], str, Path, str]] = []    # (file, temporary path, target, field)

    def open(self, path: str | os.PathLike[str], mode: str = "wb", field: str = "output", **kw: Any) -> IO[Any]:
        """A file object to write `path`'s content into ("w" or "wb"; `kw` go to `open`: encoding, newline)."""
        if mode not in ("w", "wb"):
            raise bad_value("mode", mode, '"w" or "wb"')
        target = check_target(path, field)
        if any(t == target for _, _, t, _ in self._pending):
            raise bad_value(field, os.fspath(path), "each output file named once")
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        except OSError as exc:
            raise _cannot_write(field, target, exc) from None
        try:
            f = os.fdopen(fd, mode, **({"encoding": "utf-8"} | kw if mode == "w" else kw))
        except BaseException:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise
        self._pending.append((f, tmp, target, field))
        return f

    def write(self, path: str | os.PathLike[str], data: str | bytes, field: str = "output") -> Path:
        with_text = isinstance(data, str)
        f = self.open(path, "w" if with_text else "wb", field)
        f.write(data)
        return self._pending[-1][2]

    def _commit(self) -> list[Path]:
        mode = _file_mode()
        for f, tmp, target, field in self._pending:
            try:
                f.flush()
                os.fsync(f.fileno())
                f.close()
                os.chmod(tmp, mode)
            except OSError as exc:                  # a full disk shows here, before any target is touched
                raise _cannot_write(field, target, exc) from None
        done = []
        for _, tmp, target, field in self._pending:
            try:
                os.replace(tmp, target)
            except OSError as exc:
                raise _cannot_write(field, target, exc) from None
            done.append(target)
        for folder in {t.parent for t in done}:
            _fsync_folder(folder)
        self._pending.clear()
        return done

    def _discard(self) -> None:
        for f, tmp, _, _ in self._pending:
            try:
                f.close()
            except OSError:
                pass
            Path(tmp).unlink(missing_ok=True)
        self._pending.clear()


def _cannot_write(field: str, target: Path, exc: OSError) -> TokensimError:
    return bad_value(field, str(target), f"a path that can be written ({exc.strerror or exc})")


@contextmanager
def atomic_outputs() -> Iterator[Outputs]:
    """Open any number of output files; all of them appear at the end of the block, or none of them do."""
    outputs = Outputs()
    try:
        yield outputs
        outputs._commit()
    finally:
        outputs._discard()          # nothing pending after a commit; every temporary file after a failure


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", field: str = "output", **kw: Any) -> Iterator[IO[Any]]:
    """One output file as a file object (for csv writers and matplotlib's savefig), renamed into place at the end."""
    with atomic_outputs() as outputs:
        yield outputs.open(path, mode, field, **kw)


def atomic_write(path: str | os.PathLike[str], data: str | bytes, field: str = "output") -> Path:
    """Write `data` (text as UTF-8) to `path` atomically; returns the path written."""
    with atomic_outputs() as outputs:
        outputs.write(path, data, field)
    return Path(path)


def user_data_dir() -> Path:
    """Where tokensim keeps what it writes for the user: $XDG_DATA_HOME/tokensim, else ~/.local/share/tokensim."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "share"
    return root / "tokensim"


__all__ = ["Outputs", "atomic_open", "atomic_outputs", "atomic_write", "check_target", "user_data_dir"]
