"""Every "docs/<file>.md <section>" reference in the code, tests and data files resolves.

Code, data files and tests cite the project's docs by file and section number ("docs/model.md 1.5",
"docs/model.md section 3.3", "docs/model.md sections 1.1-1.4 and 2", "docs/model.md §2.3"). These tests
check that each cited file exists and that each cited section number is a heading in it, and that no
reference to the old notes file outside the repository is left.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TEXT_SUFFIXES = {".py", ".toml", ".md", ".csv", ".txt", ".json", ".yaml", ".yml", ".cfg", ".ini", ".html"}
SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".hypothesis"}
OLD_NOTES = "theory" + ".md"      # built so that this file does not cite it

# a docs path not preceded by a path or word character (a URL ending in .../blob/main/<docs path> is not ours)
REF = re.compile(r"(?<![\w/.-])docs/(?P<file>[\w.-]+\.md)(?P<tail>[^\n]{0,80})")
NUM = r"\d+(?:\.\d+)*"
SPAN = rf"{NUM}(?:\s*[-–]\s*{NUM})?"
SECTIONS = re.compile(rf"^\s+(?:sections?\s+|§\s*)?(?P<spec>{SPAN}(?:\s*(?:,|and)\s*{SPAN})*)(?!\w)(?!\.\d)")
HEADING = re.compile(rf"^#{{1,6}}\s+(?:§\s*)?(?P<num>{NUM})\.?(?:\s|$)")


def _files(base: Path):
    if base.is_file():
        yield base
        return
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(ROOT).parts
        if any(p in SKIP_DIRS or p.endswith(".egg-info") for p in rel):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            yield path


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def cited_sections(spec: str) -> list[str]:
    """'1.1-1.4 and 2' -> ['1.1', '1.2', '1.3', '1.4', '2']; '1-2' -> ['1', '2']."""
    out: list[str] = []
    for part in re.split(r"\s*(?:,|and)\s*", spec.strip()):
        ends = [p.strip() for p in re.split(r"\s*[-–]\s*", part) if p.strip()]
        if len(ends) == 2:
            a, b = ends[0].split("."), ends[1].split(".")
            if len(a) == len(b) and a[:-1] == b[:-1] and int(a[-1]) <= int(b[-1]):
                out += [".".join(a[:-1] + [str(i)]) for i in range(int(a[-1]), int(b[-1]) + 1)]
                continue
        out += ends
    return out


def references(text: str) -> list[tuple[str, list[str]]]:
    """(file name under docs/, cited section numbers) for every docs reference in `text`."""
    refs = []
    for m in REF.finditer(text):
        s = SECTIONS.match(m.group("tail"))
        refs.append((m.group("file"), cited_sections(s.group("spec")) if s else []))
    return refs


def headings(path: Path) -> set[str]:
    return {m.group("num") for line in _text(path).splitlines() if (m := HEADING.match(line))}


def _all_references() -> list[tuple[str, int, str, list[str]]]:
    """(where, line, docs file, sections): every reference in src/, tests/ and README.md, and the references to
    docs/model.md inside docs/ (other docs quote foreign paths such as mlcommons' docs/index.md)."""
    found = []
    sources = [(p, False) for base in (ROOT / "src", ROOT / "tests", ROOT / "README.md") for p in _files(base)]
    sources += [(p, True) for p in _files(DOCS) if p.suffix == ".md"]
    for path, model_only in sources:
        for n, line in enumerate(_text(path).splitlines(), 1):
            for name, secs in references(line):
                if model_only and name != "model.md":
                    continue
                found.append((str(path.relative_to(ROOT)), n, name, secs))
    return found


def test_parser_reads_the_citation_forms():
    assert references("# docs/model.md 1.5: tuned stacks") == [("model.md", ["1.5"])]
    assert references("(docs/model.md section 3.3, alpha_eth)") == [("model.md", ["3.3"])]
    assert references("docs/model.md sections 1.1-1.4 and 2") == [("model.md", ["1.1", "1.2", "1.3", "1.4", "2"])]
    assert references("Formulas follow\ndocs/model.md sections 1-2.") == [("model.md", ["1", "2"])]
    assert references("see docs/model.md §3.2).") == [("model.md", ["3.2"])]
    assert references("cached in FP8 (docs/model.md, sparse attention)") == [("model.md", [])]
    assert references("https://github.com/deepseek-ai/DeepEP/blob/main/" + "docs/" + "legacy.md") == []
    assert references("docs/model.md 1.5x faster") == [("model.md", [])]


def test_references_are_found():
    refs = _all_references()
    model = [r for r in refs if r[2] == "model.md" and r[3]]
    assert len(model) >= 20, f"expected the code and data files to cite docs/model.md sections, found {len(model)}"
    assert any(where.endswith("constants.toml") and "1.5" in secs for where, _, _, secs in model)


def test_every_docs_reference_resolves():
    problems = []
    cache: dict[str, set[str]] = {}
    for where, line, name, secs in _all_references():
        path = DOCS / name
        if not path.is_file():
            problems.append(f"{where}:{line}: docs/{name} does not exist")
            continue
        have = cache.setdefault(name, headings(path))
        for s in secs:
            if s not in have:
                problems.append(f"{where}:{line}: docs/{name} has no heading numbered {s}")
    assert not problems, "\n".join(problems)


def test_model_doc_keeps_the_section_numbers():
    have = headings(DOCS / "model.md")
    wanted = ["1", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "2", "2.1", "2.2", "2.3", "2.4",
              "3", "3.1", "3.2", "3.3", "4", "5", "5.1", "5.2", "5.3", "6", "7"]
    assert [s for s in wanted if s not in have] == []


@pytest.mark.parametrize("base", ["src", "tests", "README.md", "docs"])
def test_no_reference_to_the_old_notes_file(base):
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in _files(ROOT / base)
            for n, line in enumerate(_text(p).splitlines(), 1) if OLD_NOTES in line.lower()]
    assert hits == [], f"references to {OLD_NOTES} left (use docs/model.md): {hits}"


def test_headings_and_a_missing_section(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Title\n\n## 1. Step\n\n### 1.1 Bytes\n\n#### 3.10 Ten\n\nText 2.2 here\n", encoding="utf-8")
    have = headings(doc)
    assert have == {"1", "1.1", "3.10"}
    assert "2.2" not in have and "1.2" not in have
