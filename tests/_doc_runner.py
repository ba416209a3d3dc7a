"""Runs the docs' code blocks for ``test_docs_examples.py``, each in a fresh process, quickly.

Started once per test session as ``python tests/_doc_runner.py``. It imports torch and trainperf
(the package alone) once, then reads one JSON request per line on standard input and answers one JSON
line per request on standard output. Each block runs in a child forked from this process, so it starts
with only what was imported here (no part of trainperf but the package itself), in its own working
directory, with the names of ``_doc_filler.fill``; the child's output goes to ``output.txt`` there.

A request: ``{"code", "name", "cwd", "needs": [modules], "gpu": bool, "given": [file kinds],
"timeout": seconds}``. An answer: ``{"status": "ok" | "failed" | "timeout" | "skip", "reason",
"output", "seconds"}``. Modules a block needs are imported here first (once for all blocks), so a
child does not pay for them again; one that cannot be imported answers ``skip``.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import _doc_filler

OUTPUT = "output.txt"
#: Modules the filler's objects import when first built (creating an optimizer imports torch._dynamo, and
#: with it sympy: seconds), imported here once so that no block's process pays for them.
WARM = ("torch._dynamo", "torch.utils.data", "psutil")
#: What a block that needs a package imports from it, beyond the package itself, imported here once too.
WARM_NEEDS = {"transformers": ("transformers.trainer", "transformers.training_args"),
              "lightning": ("lightning.pytorch",), "hta": ("hta.trace_analysis",),
              "pyspark": ("pyspark.ml.torch.distributor",)}
#: What a child exits with when a block asked for a GPU and there is none.
NO_GPU = 77


def _child(run: Any, cwd: str) -> None:
    """In a forked child: run ``run()`` in ``cwd`` with its output in ``output.txt``; never return."""
    code = 1
    try:
        os.setsid()  # its own process group: a timeout kills whatever it started too
        os.chdir(cwd)
        fd = os.open(OUTPUT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the child ends with os._exit
        code = run()
        atexit._run_exitfuncs()  # what a script's interpreter does at its end (flushing logs, closing listeners)
    except BaseException:  # noqa: BLE001 - reported in the output
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, timeout: float) -> int | None:
    """The child's exit status, or ``None`` when it ran past ``timeout`` (then it and its group are killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


def _fork(run: Any, cwd: str, timeout: float) -> int | None:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(run, cwd)
    return _wait(pid, timeout)


class Runner:
    def __init__(self) -> None:
        self._scratch = Path(tempfile.mkdtemp(prefix="trainperf-docs-"))
        self._capture: Path | None = None

    def _given(self, kind: str, cwd: Path) -> None:
        """Files a block's process makes itself (``train.log``) are made there, not here."""
        if kind == "train.log":
            pass
        elif kind == "a capture in traces/":
            if self._capture is None:  # made once, in a child: it imports trainperf.torch
                folder = self._scratch / "traces"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                status = _fork(lambda: _doc_filler.write_capture(folder) or 0, str(self._scratch), 120)
                if status != 0:
                    output = (self._scratch / OUTPUT).read_text(errors="replace")
                    raise RuntimeError(f"making the capture failed ({status}):\n{output}")
                self._capture = folder
            shutil.copytree(self._capture, cwd / "traces")
        else:
            raise ValueError(f"unknown given file {kind!r}")

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        for name in request["needs"]:
            try:
                for module in (name, *WARM_NEEDS.get(name, ())):
                    importlib.import_module(module)
            except ImportError as e:
                return {"status": "skip", "reason": f"needs {name}, which cannot be imported here: {e}"}
        cwd = Path(request["cwd"])
        for kind in request["given"]:
            self._given(kind, cwd)
        needs = tuple(request["needs"])
        compiled = compile(request["code"], request["name"], "exec")
        gpu = request["gpu"]
        train_log = "train.log" in request["given"]

        def run() -> int:
            if gpu:
                import torch

                if not torch.cuda.is_available():
                    return NO_GPU
            if train_log:
                _doc_filler.write_train_log(Path("train.log"))
            namespace: dict[str, Any] = {"__name__": "__main__"}
            _doc_filler.fill(namespace, needs=needs)
            exec(compiled, namespace)
            return 0

        start = time.perf_counter()
        status = _fork(run, str(cwd), request["timeout"])
        seconds = time.perf_counter() - start
        output = (cwd / OUTPUT).read_text(errors="replace") if (cwd / OUTPUT).exists() else ""
        if status == NO_GPU:
            return {"status": "skip", "reason": "needs a GPU, and torch sees none", "seconds": seconds}
        state = "ok" if status == 0 else "timeout" if status is None else "failed"
        return {"status": state, "exit": status, "output": output[-6000:], "seconds": seconds}


def main() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    # the answers go to the test on a stdout of their own: whatever the imports below print (transformers
    # says when W&B logs offline) goes to stderr and cannot break a line of the protocol
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import torch  # noqa: F401 - once here, not in every block's process

    import trainperf  # noqa: F401

    for module in WARM:
        try:
            importlib.import_module(module)
        except ImportError:  # psutil is optional: a block that uses it imports it itself
            pass
    runner = Runner()
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        try:
            answer = runner.handle(json.loads(line))
        except Exception:  # noqa: BLE001 - said to the test, which fails with it
            answer = {"status": "failed", "output": traceback.format_exc()}
        print(json.dumps(answer), file=answers, flush=True)
    shutil.rmtree(runner._scratch, ignore_errors=True)
    os._exit(0)  # tearing down torch, Lightning and the rest would only take seconds


if __name__ == "__main__":
    main()
