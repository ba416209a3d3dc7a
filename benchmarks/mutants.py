"""A small mutation check: put one realistic bug at a time into a module and see whether the tests
catch it.

Each mutant changes one spot of the source: a comparison (``<`` and ``<=``, ``>`` and ``>=``, ``==``
and ``!=``), an arithmetic operator (``+`` and ``-``, ``*`` and ``/``), a number (``0`` to ``1``,
others doubled), ``and`` and ``or``, ``min`` and ``max``, ``True`` and ``False``. Docstrings and
constants' names are left alone. Every mutant runs the given tests in a scratch copy of the
project; a mutant that no test fails *survives*. The score is the share of mutants killed.

Run: ``python benchmarks/mutants.py src/trainperf/records/_window.py [...] --tests tests/test_window.py [...]``.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


@dataclass
class Mutant:
    path: str
    line: int
    what: str
    source: str


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _spots(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every place one mutation can go, in a fixed order (``ast.walk``'s)."""
    docstrings = _docstring_nodes(tree)
    spots: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            spots += [(node, f"compare{i}") for i, op in enumerate(node.ops) if type(op) in _COMPARE]
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
            spots.append((node, "binop"))
        elif isinstance(node, ast.BoolOp):
            spots.append((node, "boolop"))
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, (bool, int, float)):
                spots.append((node, "const"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            spots.append((node, "minmax"))
    return spots


def mutants_of(path: str) -> list[Mutant]:
    """One mutant per spot of ``path``, each from a fresh parse of the file."""
    text = Path(path).read_text()
    out = []
    for index in range(len(_spots(ast.parse(text)))):
        tree = ast.parse(text)
        node, kind = _spots(tree)[index]
        what = _mutate(node, kind)
        out.append(Mutant(path, getattr(node, "lineno", 0), what, ast.unparse(tree)))
    return out


def _mutate(node: ast.AST, kind: str) -> str:
    if kind.startswith("compare"):
        i = int(kind[7:])
        old = node.ops[i]  # type: ignore[attr-defined]
        node.ops[i] = _COMPARE[type(old)]()  # type: ignore[attr-defined]
        return f"{type(old).__name__} -> {type(node.ops[i]).__name__}"  # type: ignore[attr-defined]
    if kind == "binop":
        old = node.op  # type: ignore[attr-defined]
        node.op = _BINOP[type(old)]()  # type: ignore[attr-defined]
        return f"{type(old).__name__} -> {type(node.op).__name__}"  # type: ignore[attr-defined]
    if kind == "boolop":
        old = node.op  # type: ignore[attr-defined]
        node.op = ast.Or() if isinstance(old, ast.And) else ast.And()  # type: ignore[attr-defined]
        return f"{type(old).__name__} -> {type(node.op).__name__}"  # type: ignore[attr-defined]
    if kind == "minmax":
        old = node.func.id  # type: ignore[attr-defined]
        node.func.id = "max" if old == "min" else "min"  # type: ignore[attr-defined]
        return f"{old} -> {node.func.id}"  # type: ignore[attr-defined]
    value = node.value  # type: ignore[attr-defined]
    if isinstance(value, bool):
        node.value = not value  # type: ignore[attr-defined]
    elif value == 0:
        node.value = 1  # type: ignore[attr-defined]
    else:
        node.value = value * 2  # type: ignore[attr-defined]
    return f"{value!r} -> {node.value!r}"  # type: ignore[attr-defined]


def _run(mutant: Mutant, copy: Path, tests: list[str], timeout: float) -> bool:
    """True when the tests catch the mutant (fail or time out)."""
    target = copy / mutant.path
    original = target.read_text()
    target.write_text(mutant.source)
    try:
        env = {**os.environ, "PYTHONPATH": str(copy / "src")}
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not realtime and not long",
             *tests],
            cwd=copy, env=env, capture_output=True, timeout=timeout,
        )
        return proc.returncode != 0
    except subprocess.TimeoutExpired:
        return True
    finally:
        target.write_text(original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+")
    parser.add_argument("--tests", nargs="+", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    mutants = [m for path in args.modules for m in mutants_of(path)]
    copies = []
    for _ in range(args.jobs):
        copy = Path(tempfile.mkdtemp(prefix="trainperf-mutants-"))
        for part in ("src", "tests", "pyproject.toml"):
            (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, copy / part)
        copies.append(copy)

    def job(i: int) -> tuple[Mutant, bool]:
        return mutants[i], _run(mutants[i], copies[i % args.jobs], args.tests, args.timeout)

    survived: list[Mutant] = []
    per_module: dict[str, list[int]] = {}
    with ThreadPoolExecutor(args.jobs) as pool:
        # each copy runs one mutant at a time: job i uses copy i % jobs, so submit in rounds
        for start in range(0, len(mutants), args.jobs):
            for mutant, killed in pool.map(job, range(start, min(start + args.jobs, len(mutants)))):
                counts = per_module.setdefault(mutant.path, [0, 0])
                counts[0] += killed
                counts[1] += 1
                if not killed:
                    survived.append(mutant)
                    print(f"survived: {mutant.path}:{mutant.line} {mutant.what}", flush=True)
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)
    total = sum(c[1] for c in per_module.values())
    killed = sum(c[0] for c in per_module.values())
    for path, (k, n) in per_module.items():
        print(f"{path}: {k} of {n} killed ({100.0 * k / n:.0f}%)")
    print(f"all: {killed} of {total} killed ({100.0 * killed / max(1, total):.0f}%)")


if __name__ == "__main__":
    main()
