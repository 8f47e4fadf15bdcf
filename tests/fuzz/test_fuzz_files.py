"""The one safe reader, fed any bytes under any suffix, and paths that are not files: a dict or one
TokensimError naming the path, in bounded time, through the library and through every command that reads a
user's file. Nothing is written outside the test's folder."""
import os
import tempfile
from pathlib import Path

import pytest
from fuzz_support import FUZZ, cli, repo_listing, structural, time_limit
from hypothesis import given, settings
from hypothesis import strategies as st

from tokensim.errors import TokensimError
from tokensim.inputs.files import MAX_FILE_BYTES, read_mapping

SUFFIXES = [".toml", ".yaml", ".yml", ".json", ".jsonl", ".txt", ""]
COMMANDS = {  # how each command is handed a file of a given name
    "hardware": lambda p: ("predict", "--hardware", p),
    "model": lambda p: ("predict", "--model", p),
    "scenario": lambda p: ("run", p),
    "session": lambda p: ("agent", "cs3-capacity", "--session", p),
}
any_bytes = st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                      st.sampled_from(["toml", "yaml", "json"]).flatmap(structural).map(str.encode))


@FUZZ
@given(raw=any_bytes, suffix=st.sampled_from(SUFFIXES))
def test_any_bytes_read_as_a_dict_or_one_error(tmp_path, raw, suffix):
    """Binary junk, random text and structural bombs under every suffix: a dict or one line naming the file."""
    path = tmp_path / f"input{suffix}"
    path.write_bytes(raw)
    with time_limit():
        try:
            data = read_mapping(path)
        except TokensimError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
        else:
            assert isinstance(data, dict)


@settings(FUZZ, max_examples=100)
@given(raw=any_bytes, suffix=st.sampled_from(SUFFIXES), command=st.sampled_from(sorted(COMMANDS)))
def test_any_bytes_through_every_command(tmp_path, monkeypatch, raw, suffix, command):
    """The same through `predict --hardware`, `predict --model`, `run` and `agent --session`: exit 0 or 2,
    one line, and no file left behind."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))       # a fresh folder per example, inside tmp_path
    monkeypatch.chdir(work)
    before = repo_listing()
    name = f"input{suffix}" if command != "scenario" else "input.toml"
    (work / name).write_bytes(raw)
    with time_limit():
        cli(*COMMANDS[command](name))
    assert sorted(p.name for p in work.iterdir()) == [name]
    assert repo_listing() == before


def _special_paths(folder: Path, suffix: str = ".toml") -> dict[str, Path]:
    """Paths that are not readable files: missing, a folder, a FIFO (opening it would block), a symlink loop,
    a file over the size limit, a name too long for the OS."""
    folder.mkdir()
    (folder / f"folder{suffix}").mkdir()
    os.mkfifo(folder / f"pipe{suffix}")
    (folder / f"loop{suffix}").symlink_to(folder / f"loop{suffix}")
    with (folder / f"big{suffix}").open("wb") as f:    # sparse: no 8 MiB actually written
        f.truncate(MAX_FILE_BYTES + 1)
    names = {"missing": "missing", "folder": "folder", "fifo": "pipe", "loop": "loop", "big": "big", "long name": "x" * 300}
    return {what: folder / f"{stem}{suffix}" for what, stem in names.items()}


def test_paths_that_are_not_files_are_refused_by_the_reader(tmp_path):
    """Each special path is one TokensimError naming it, within a few seconds."""
    for what, path in _special_paths(tmp_path / "paths").items():
        with time_limit(5), pytest.raises(TokensimError) as err:
            read_mapping(path)
        assert str(path) in str(err.value), what


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_paths_that_are_not_files_through_every_command(tmp_path, monkeypatch, command):
    """Each command refuses each special path with exit 2 and one line, within a few seconds (a FIFO is
    never opened, the oversized file never read)."""
    monkeypatch.chdir(tmp_path)
    paths = _special_paths(tmp_path / "paths", ".json" if command == "model" else ".toml")
    for what, path in paths.items():
        with time_limit(5):
            result = cli(*COMMANDS[command](str(path)))
        assert result.exit_code == 2, (what, result.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paths"]
