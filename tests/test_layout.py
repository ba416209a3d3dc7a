"""The package's layout reads like its architecture: a small root, parts that talk through each other's
public names, modules small enough to read, and docs/index.md naming every file there is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "trainperf"
INDEX = Path(__file__).resolve().parents[1] / "docs" / "index.md"
ADAPTERS = ("torch", "lightning", "transformers")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """``trainperf.core._listener`` -> ``core``; the root's own modules -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""


def imported(path: Path) -> list[tuple[str, str]]:
    """``(module, name)`` for every ``from ... import name`` of trainperf in ``path``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "trainperf" or target.startswith("trainperf."):
                found += [(target, alias.name) for alias in node.names]
    return found


FILES = sorted(PACKAGE.rglob("*.py"))


def test_the_root_holds_at_most_twelve_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_part_imports_a_private_name_of_another(path):
    here = part_of(module_name(path))
    wrong = []
    for target, name in imported(path):
        there = part_of(target)
        if there == here or not there:
            continue
        inside = target.split(".")[2:]
        if there.startswith("_") or any(p.startswith("_") for p in inside) or name.startswith("_"):
            wrong.append(f"{target}:{name}")
    assert wrong == []


def test_the_listener_and_every_adapter_module_stay_small():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in FILES}
    assert sizes["core/_listener.py"] <= 400
    big = {name: n for name, n in sizes.items() if name.split("/")[0] in ADAPTERS and n > 400}
    assert big == {}


def index_paths() -> set[str]:
    """The files named in docs/index.md's "Where things are": each cell names a folder (`core/`) and then
    files in it (`_listener.py`), or files relative to the last folder named."""
    text = INDEX.read_text(encoding="utf-8").split("## Where things are", 1)[1]
    named: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        folder = ""
        for token in re.findall(r"`([^`]+)`", line):
            if token.endswith("/"):
                folder = token
            elif token.endswith(".py"):
                named.add(token if "/" in token else folder + token)
    return named


def test_docs_index_names_every_module_and_nothing_else():
    actual = {str(p.relative_to(PACKAGE)) for p in FILES if p.name != "__init__.py"}
    named = index_paths()
    assert sorted(actual - named) == [], "modules the index does not name"
    assert sorted(named - actual) == [], "files the index names that do not exist"
