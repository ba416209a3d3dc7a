"""Which part may import which: the framework-free core and the multi-rank package import no
adapter, sinks know nothing of the listener, and no module-level import goes round in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _needs import integration

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "trainperf"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, top_level_only: bool) -> set[str]:
    """The trainperf modules ``path`` imports (``from . import x`` counts ``x`` when it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("trainperf"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if _exists(sub) else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("trainperf"))
    return found


def _exists(module: str) -> bool:
    path = SRC / Path(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
ADAPTERS = ("trainperf.torch", "trainperf.lightning", "trainperf.transformers", "trainperf.data", "trainperf.diagnosis",
            "trainperf.cli", "trainperf.ray")


def is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_core_and_the_multi_rank_package_import_no_adapter(name):
    if name in ("trainperf", "trainperf.__main__") or any(is_under(name, a) for a in ADAPTERS):
        return  # the package's front door re-exports; adapters may use each other's public parts
    used = imports(MODULES[name], top_level_only=False)
    assert not [m for m in used if any(is_under(m, a) for a in ADAPTERS)], used


@pytest.mark.parametrize("name", sorted(n for n in MODULES if is_under(n, "trainperf.sinks")))
def test_sinks_know_nothing_of_the_listener(name):
    used = imports(MODULES[name], top_level_only=False)
    assert "trainperf.core._listener" not in used and "trainperf" not in used, used


def test_no_module_level_import_goes_round_in_a_circle():
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = {m for m in imports(path, top_level_only=True) if m in MODULES and m != name}
        # importing a module runs its packages' __init__ first
        targets |= {".".join(m.split(".")[:k]) for m in set(targets) for k in range(2, m.count(".") + 1)}
        # ...except the module's own packages: Python has started those already
        graph[name] = {m for m in targets if not is_under(name, m)}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_nothing_imports_transformers_or_accelerate_unless_the_trainer_adapter_is_used():
    import subprocess
    import sys

    # (pytorch_lightning imports transformers itself when it is installed: the Lightning adapter is not run here)
    code = ("import sys, trainperf, trainperf.torch, trainperf.data; "
            "print(sorted(m for m in ('transformers', 'accelerate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for name, path in MODULES.items():  # and no module of ours outside the adapter names either
        if not is_under(name, "trainperf.transformers"):
            tree = ast.parse(path.read_text())
            named = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for a in node.names}
            named |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and not node.level}
            assert not named & {"transformers", "accelerate"}, name


@pytest.mark.integration
def test_the_trainer_adapter_imports_transformers():
    import subprocess
    import sys

    integration("transformers")
    code = "import sys, trainperf.transformers; print('transformers' in sys.modules)"
    used = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert used.strip() == "True"
