"""Every ```python block of README.md and docs/*.md runs as written, on this machine.

Each block (with the blocks that continue it) runs in a fresh process, in an empty working directory,
given the names of ``tests/_doc_filler.py`` (``model``, ``loader``, ``optimizer``, ...). An HTML comment on
the line before a block says what else it takes, one or more of, separated by ``;``:

* ``<!-- example: continues -->``: the block goes on from the one before it in the same file, and runs
  after it in the same process;
* ``<!-- example: needs pandas, hta and the java command -->``: modules to import (the block is skipped,
  saying why, when one cannot be), commands on the PATH, or ``a GPU``;
* ``<!-- example: given train.log -->`` or ``given a capture in traces/``: files in its working directory;
* ``<!-- example: timeout 300 s -->``: a block that may take longer than ``TIMEOUT_S`` (a Spark job, which
  starts a JVM and a process per rank); it is marked ``realtime`` too, so the quick run leaves it out.

A block that needs a GPU is marked ``gpu`` as well.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import trainperf
from _needs import PACKAGES as INTEGRATION_PACKAGES
from _needs import integration

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>\S*)[ \t]*$")
MARK = re.compile(r"^[ \t]*<!--\s*example:\s*(?P<says>.*?)\s*-->[ \t]*$")
GIVEN = ("train.log", "a capture in traces/")
#: Seconds a block may take; what needs more (a Spark job) is told with ``timeout``.
TIMEOUT_S = 120.0


@dataclass
class Example:
    """One runnable example: a block and the blocks that continue it."""

    path: Path
    line: int  # of the first block's fence, 1-based
    code: str  # the blocks' lines at their own line numbers, blank elsewhere, so tracebacks name them
    needs: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    gpu: bool = False
    given: list[str] = field(default_factory=list)
    timeout: float = TIMEOUT_S
    fences: list[int] = field(default_factory=list)  # the 1-based lines of its blocks' fences

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _apply(example: Example, says: str, where: str) -> None:
    for part in (p.strip() for p in says.split(";")):
        if part in ("", "continues"):
            continue
        if part.startswith("needs "):
            for need in re.split(r",\s*|\s+and\s+", part[len("needs "):]):
                if need == "a GPU":
                    example.gpu = True
                elif m := re.fullmatch(r"the (\S+) command", need):
                    example.commands.append(m.group(1))
                elif re.fullmatch(r"[A-Za-z_][\w.]*", need):
                    example.needs.append(need)
                else:
                    raise ValueError(f"{where}: cannot tell what {need!r} needs")
        elif part.startswith("given "):
            if part[len("given "):] not in GIVEN:
                raise ValueError(f"{where}: no filler makes {part!r}; one of {GIVEN}")
            example.given.append(part[len("given "):])
        elif m := re.fullmatch(r"timeout (\d+) s", part):
            example.timeout = float(m.group(1))
        else:
            raise ValueError(f"{where}: unknown example mark {part!r}")


def examples(path: Path) -> list[Example]:
    """The python blocks of one markdown file, those that continue another joined to it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    k = 0
    while k < len(lines):
        fence = FENCE.match(lines[k])
        if fence is None:
            k += 1
            continue
        end = next(j for j in range(k + 1, len(lines)) if lines[j].strip() == "```")
        if fence["lang"] == "python":
            says = ""
            before = k - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            if before >= 0 and (mark := MARK.match(lines[before])):
                says = mark["says"]
            body = textwrap.dedent("\n".join(lines[k + 1:end])).splitlines()
            where = f"{path.name}:{k + 1}"
            if "continues" in [p.strip() for p in says.split(";")]:
                if not found:
                    raise ValueError(f"{where}: marked as continuing, but no block comes before it")
                example = found[-1]
            else:
                example = Example(path, k + 1, "")
                found.append(example)
            code = example.code.splitlines()
            code += [""] * (k + 1 - len(code))  # the block's first line is the markdown's line k + 2
            example.code = "\n".join(code + body) + "\n"
            example.fences.append(k + 1)
            _apply(example, says, where)
        k = end + 1
    return found


ALL = [e for path in DOCS for e in examples(path)]


def test_every_python_block_is_found_and_every_mark_belongs_to_one():
    """No block escapes the run (an indented one in a list, say), and no mark is left dangling."""
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        fences = [k for k, line in enumerate(lines) if re.match(r"^\s*```python\s*$", line)]
        run = sorted(line for e in ALL if e.path == path for line in e.fences)
        assert run == [k + 1 for k in fences], path.name
        for k, line in enumerate(lines):
            if MARK.match(line):
                after = next(j for j in range(k + 1, len(lines)) if lines[j].strip())
                assert after in fences, f"{path.name}:{k + 1}: an example mark not just before a python block"


def _command_lines() -> list[tuple[str, str]]:
    """The ``trainperf ...`` lines of the docs' shell blocks (a ``$`` prompt and ``#`` comments allowed)."""
    found = []
    for path in DOCS:
        block: str | None = None  # the open block's language
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if fence := FENCE.match(line):
                block = fence["lang"] if block is None else None
            elif block in ("", "bash", "console", "sh") and re.match(r"^\s*(\$ )?trainperf ", line):
                found.append((f"{path.relative_to(ROOT)}:{k + 1}", line.strip().removeprefix("$ ")))
    return found


def test_the_docs_trainperf_commands_are_what_the_command_line_takes(capsys):
    """Each command shown is parsed by trainperf's own parser (nothing is run): no option that is not there."""
    from trainperf.cli._main import build_parser

    lines = _command_lines()
    assert len(lines) >= 10  # report, bench, doctor, parse, plot
    for where, line in lines:
        words = shlex.split(line, comments=True)
        try:
            build_parser().parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"{where}: {line!r} is refused: {capsys.readouterr().err}")


def test_marks_are_read_and_a_wrong_one_is_refused(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- example: needs pandas, hta and the java command; given train.log -->\n```python\na = 1\n"
                   "```\n\ntext\n\n<!-- example: continues; needs a GPU -->\n  ```python\n  b = a\n  ```\n")
    [example] = examples(doc)
    assert (example.needs, example.commands, example.gpu, example.given) == (["pandas", "hta"], ["java"], True,
                                                                            ["train.log"])
    assert example.code.splitlines()[2] == "a = 1" and example.code.splitlines()[9] == "b = a"
    doc.write_text("<!-- example: needs a cluster of 8 nodes -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="cannot tell"):
        examples(doc)
    doc.write_text("<!-- example: runs on Tuesdays -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="unknown example mark"):
        examples(doc)


@pytest.fixture(scope="module")
def runner():
    """One ``_doc_runner.py`` for the module: it imports torch once and forks a process per block."""
    pytest.importorskip("torch")
    src = Path(trainperf.__file__).parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH", "")]))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # a block's run directory takes rank 0, as in one plain process
    # the trackers' examples log offline, into the block's working directory
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", MLFLOW_TRACKING_URI="./mlruns",
               MLFLOW_ALLOW_FILE_STORE="true")
    process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "_doc_runner.py")], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdin is not None
    assert json.loads(process.stdout.readline()) == {"ready": True}
    yield process
    process.stdin.close()
    process.wait(timeout=60)


def _ask(process: subprocess.Popen[str], request: dict[str, object], timeout: float) -> dict[str, object]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    # The runner kills a block that runs too long; this bounds the runner itself (an import that hangs).
    ready, _, _ = select.select([process.stdout], [], [], timeout + 300)
    assert ready, f"the docs' runner did not answer within {timeout + 300:.0f} s"
    return json.loads(process.stdout.readline())


def _params() -> list[object]:
    params = []
    for e in ALL:
        marks = ([pytest.mark.realtime] if e.timeout > TIMEOUT_S else []) + ([pytest.mark.gpu] if e.gpu else [])
        if set(e.needs) & set(INTEGRATION_PACKAGES):  # Spark, the Trainer, trace analysis: the integration command
            marks.append(pytest.mark.integration)
        params.append(pytest.param(e, marks=marks, id=e.name))
    return params


@pytest.mark.parametrize("example", _params())
def test_the_docs_python_block_runs_as_written(example, runner, tmp_path):
    for command in example.commands:
        if shutil.which(command) is None:
            pytest.skip(f"{example.name} needs the {command} command, which is not on the PATH")
    for module in set(example.needs) & set(INTEGRATION_PACKAGES):
        integration(module)
    answer = _ask(runner, {"code": example.code, "name": str(example.path.relative_to(ROOT)), "cwd": str(tmp_path),
                           "needs": example.needs, "gpu": example.gpu, "given": example.given,
                           "timeout": example.timeout}, example.timeout)
    if answer["status"] == "skip":
        pytest.skip(f"{example.name}: {answer['reason']}")
    assert answer["status"] == "ok", f"{example.name} {answer['status']} ({answer.get('exit')}):\n{answer['output']}"
