"""Runs every ```python example of the documentation (README.md, docs/,
bindings-python/README.md) against the test servers, so a renamed method
breaks this suite rather than the docs.

The blocks of one Markdown file run in order, in one fresh interpreter, so a
page's later examples may use what its earlier ones made. A block preceded by
`<!-- fragment: reason -->` is skipped (code that needs another library, or
that is not a whole statement); the reason must be given. The documented
URLs (the local servers' ports, or the default ones) are pointed at
POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import redis_url, zk_url

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = ("python", "py")
FENCE = re.compile(r"^```(\S*)\s*$")
FRAGMENT = re.compile(r"^<!--\s*fragment:\s*(\S.*?)\s*-->\s*$")
DOCUMENTED_URLS = {
    "redis": ("redis://127.0.0.1:6390", "redis://127.0.0.1:6379"),
    "zk": ("zk://127.0.0.1:2191", "zk://127.0.0.1:2181"),
}


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the block's first code line
    code: str


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "bindings-python" / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def examples(path: Path, languages: tuple[str, ...] = LANGUAGES) -> list[Block]:
    """The runnable blocks of `languages` in `path`, fragments left out."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        language = fence.group(1).split(",")[0]
        start = i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        if language in languages and not FRAGMENT.match(before):
            blocks.append(Block(path, start + 1, "\n".join(lines[start:end])))
        i = end + 1
    return blocks


def program(blocks: list[Block]) -> str:
    """One script: each block at its own line numbers' comment, URLs pointed
    at the test servers."""
    parts = []
    for block in blocks:
        code = block.code
        for url in DOCUMENTED_URLS["redis"]:
            code = code.replace(url, redis_url())
        for url in DOCUMENTED_URLS["zk"]:
            code = code.replace(url, zk_url())
        parts.append(f"# --- {block.path.relative_to(ROOT)}:{block.line}\n{code}\n")
    return "\n".join(parts)


FILES = [f for f in doc_files() if examples(f)]


def test_the_documentation_has_python_examples() -> None:
    assert FILES, "no ```python example found: the extractor or the docs moved"


def test_every_fragment_marker_gives_a_reason() -> None:
    bare = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in [
            *doc_files(),
            ROOT / "bindings-node" / "README.md",
            ROOT / "bindings-jvm" / "README.md",
        ]
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if line.strip().startswith("<!-- fragment") and not FRAGMENT.match(line.strip())
    ]
    assert not bare, f"fragment markers without a reason: {bare}"


@pytest.mark.parametrize("path", FILES, ids=[str(f.relative_to(ROOT)) for f in FILES])
def test_python_examples_run(path: Path) -> None:
    source = program(examples(path))
    run = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, (
        f"a ```python example of {path.relative_to(ROOT)} failed "
        f"(the '# --- file:line' comment above the failing line says which block):\n"
        f"{run.stderr[-4000:]}\n--- program (line numbers as in the traceback) ---\n"
        + "\n".join(f"{n:4}  {line}" for n, line in enumerate(source.splitlines(), 1))
    )


def test_every_page_with_rust_examples_is_a_doctest() -> None:
    """Rust examples run as doctests (runtime/src/doc_examples.rs), which
    include each page by name: a new page must be added there."""
    included = (ROOT / "runtime" / "src" / "doc_examples.rs").read_text()
    missing = [
        str(f.relative_to(ROOT))
        for f in doc_files()
        if examples(f, ("rust",)) and f'"../../{f.relative_to(ROOT)}"' not in included
    ]
    assert not missing, f"pages with ```rust examples not in runtime/src/doc_examples.rs: {missing}"
