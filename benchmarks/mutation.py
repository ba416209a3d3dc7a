"""Mutation testing with cosmic-ray over the modules that compute what users read.

Each module is mutated in a git worktree of its own (the checkout stays untouched), against the
tests that pin it; modules run side by side, ``--jobs`` at a time. Prints, per module, the mutants
killed and the survivors (file, line, operator), which ``tests/README.md`` judges.

Slow (one pytest run per mutant): not part of CI. Needs ``pip install cosmic-ray``.

Run: ``python benchmarks/mutation.py [MODULE ...] [--jobs 2] [--keep DIR [--report]]``; with no
module, all of :data:`MODULES`. A module is a path under ``src/trainperf`` such as ``records/_verdict.py``.
With ``--keep`` the sessions stay under DIR: ``--report`` prints what they hold so far (a long run
can be read while it goes), and running again resumes where it stopped.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Module (under src/trainperf) -> the tests that pin it (and pytest arguments, such as ``-k``, that
#: leave out its slow tests of other things: the report's pages in a browser).
MODULES: dict[str, tuple[str, ...]] = {
    "records/_window.py": ("tests/test_window.py", "tests/test_attribution.py"),
    "records/_goodput.py": ("tests/test_goodput_account.py", "tests/test_goodput.py"),
    "records/_goodput_rows.py": ("tests/test_goodput_account.py", "tests/test_goodput.py"),
    "ranks/_ledger.py": ("tests/test_goodput.py",),
    "core/_goodput_live.py": ("tests/test_goodput.py",),
    "records/_memory.py": ("tests/test_memory.py",),
    "core/_memory_watch.py": ("tests/test_memory.py",),
    "core/_host_memory.py": ("tests/test_memory.py",),
    "records/_verdict.py": ("tests/test_verdict.py",),
    "sinks/_tracked.py": ("tests/test_tracked.py",),
    "sinks/_wandb.py": ("tests/test_tracked.py",),
    "sinks/_mlflow.py": ("tests/test_tracker_sinks.py", "-k", "'mlflow or bad or missing or rank or active'"),
    "ray/_data.py": ("tests/test_ray_data.py",),
    "ray/_report.py": ("tests/test_ray_report.py",),
    "ray/_callback.py": ("tests/test_ray_callback.py",),
    "ranks/_silent.py": ("tests/test_ray_callback.py",),
    "sinks/_metrics.py": ("tests/test_tracked.py", "tests/test_sinks_files.py"),
    "records/_summary.py": ("tests/test_summary.py",),
    "records/_timeline.py": ("tests/test_timeline.py", "tests/test_timeline_loops.py"),
    "ranks/_stragglers.py": ("tests/test_stragglers.py", "tests/test_straggler_rules.py", "tests/test_report.py"),
    "ranks/_windows.py": ("tests/test_straggler_rules.py",),
    "ranks/_pattern.py": ("tests/test_straggler_rules.py",),
    "ranks/_report/_named.py": ("tests/test_straggler_rules.py", "tests/test_report.py", "-k", "not browser"),
    "base/_atomic.py": ("tests/test_atomic.py", "tests/test_sink_faults.py"),
    "ranks/_gather.py": ("tests/test_gather.py",),
    "core/_own_time.py": ("tests/test_own_time.py", "tests/test_attribution.py", "-k", "'own_time or collection'"),
    "core/_build.py": ("tests/test_build.py",),
    "core/_open_window.py": ("tests/test_open_window.py", "tests/test_attribution.py", "tests/test_collective.py"),
    "core/_totals.py": ("tests/test_totals.py",),
    "core/_publish.py": ("tests/test_publish.py",),
    "core/_closer.py": ("tests/test_closer.py",),
    "core/_handover.py": ("tests/test_handover.py",),
    "core/_accountant.py": ("tests/test_accountant.py",),
    "torch/_setup.py": ("tests/test_setup.py",),
    "torch/_oom.py": ("tests/test_oom_evidence.py", "-k", "'not lightning and not trainer'"),
    "torch/_oom_sites.py": ("tests/test_oom_evidence.py", "-k", "'sites or tensors or sizes or process_memory or "
                            "tracemalloc or without_a_run or (memory_error and run_attach)'"),
    "torch/_memory_history.py": ("tests/test_oom_evidence.py", "-k", "'history or synchronisation'"),
    "records/_peaks.py": ("tests/test_peaks.py",),
    "torch/_flops.py": ("tests/test_flops.py", "tests/test_tokens_adapters.py"),
    "profile/_rule.py": ("tests/test_capture_rule.py", "tests/test_capture.py"),
    "profile/_trace_file.py": ("tests/test_trace_file.py",),
    "records/_padding.py": ("tests/test_tokens_padding.py",),
    "core/_step_flops.py": ("tests/test_step_flops.py",),
    "profile/_capture.py": ("tests/test_capture.py",),
    "core/_readings.py": ("tests/test_readings.py", "tests/test_attribution.py"),
    "core/_notices.py": ("tests/test_notices.py",),
    "core/_collections.py": ("tests/test_collections.py",),
    "core/_emit.py": ("tests/test_emit.py", "tests/test_emit_batches.py"),
    # the generated-record tests aside (20 s a run): the fixed records hold the odd values they find
    "records/_json.py": ("tests/test_record_writers.py", "tests/test_sink_output.py", "-k", "'not generated'"),
    "records/_compiled_line.py": ("tests/test_record_writers.py", "tests/test_sink_output.py", "tests/test_format.py",
                                  "-k", "'not generated'"),
    "records/_memo.py": ("tests/test_record_writers.py",),
    "torch/_gap.py": ("tests/test_gap.py",),
    "torch/_batch.py": ("tests/test_batch.py",),
    "sinks/_jsonlines.py": ("tests/test_sinks_files.py", "tests/test_sinks_kill.py", "tests/test_emit_batches.py",
                            "tests/test_sink_output.py"),
    "sinks/_csv.py": ("tests/test_sinks_files.py", "tests/test_sinks_kill.py", "tests/test_sink_faults.py",
                      "tests/test_sink_output.py", "tests/test_record_writers.py"),
    "sinks/_base.py": ("tests/test_hostile_sinks.py", "tests/test_emit.py", "tests/test_sinks.py",
                       "tests/test_emit_batches.py"),
    "cli/_tables.py": ("tests/test_tables.py", "tests/test_cli_parse.py", "tests/test_cli.py"),
    "ranks/_report/_notes.py": ("tests/test_notes.py", "tests/test_report_hostile.py"),
    "data/_bench.py": ("tests/test_bench.py",),
    "logs/_lines.py": ("tests/test_lines.py", "tests/test_parse.py", "tests/test_parse_hostile.py",
                        "tests/test_parse_bulk.py", "tests/test_format.py"),
    "logs/_parse.py": ("tests/test_parse.py", "tests/test_parse_hostile.py", "tests/test_parse_bulk.py"),
    "logs/_bulk.py": ("tests/test_parse_bulk.py", "tests/test_parse_bulk_cut.py", "tests/test_parse.py",
                      "tests/test_parse_hostile.py"),
    "torch/_attach.py": ("tests/test_attribution.py", "tests/test_torch_adapter.py", "tests/test_torch_loops.py",
                         "tests/test_timeline_loops.py", "tests/test_attach_spans.py"),
    "torch/_registry.py": ("tests/test_torch_adapter.py", "tests/test_torch_loops.py"),
    "torch/_checkpoint.py": ("tests/test_attach_spans.py",),
    "lightning/_callback.py": ("tests/test_lightning_split.py", "tests/test_lightning.py"),
    "torch/_loop_hooks.py": ("tests/test_loop_hooks.py", "tests/test_torch_adapter.py", "tests/test_torch_loops.py",
                             "tests/test_attribution.py"),
    # the measured steps aside: the arithmetic's own tests take plain numbers
    "diagnosis/_memory_fixes.py": ("tests/test_doctor_memory.py", "-k", "'not measured and not cli'"),
    "ranks/_report/_load.py": ("tests/test_load.py", "tests/test_run_dir.py", "tests/test_report_hostile.py",
                               "tests/test_report.py", "-k", "'not chromium and not html'"),
}

PYTEST = "-m pytest -x -q -p no:cacheprovider -m 'not realtime and not long'"

CONFIG = """[cosmic-ray]
module-path = "src/trainperf/{module}"
timeout = 120.0
excluded-modules = []
test-command = "env PYTHONPATH=src {command}"

[cosmic-ray.distributor]
name = "local"
"""


def run_module(module: str, tests: tuple[str, ...], work: Path, keep: bool,
               retest: bool = False, covering: bool = False,
               tests_at: str | None = None) -> tuple[str, int, int, list[str], int, int]:
    """Mutate ``module`` in a worktree of its own; (module, run, killed, survivors, mutants). With ``keep``
    the worktree stays, and a session found there is resumed rather than started again."""
    tree = work / module.replace("/", "_")
    session = tree / "session.sqlite"
    resume = keep and session.exists()
    if resume and retest:  # the survivors again, against the tests as they are now
        with sqlite3.connect(session) as db:
            db.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")
    if not resume:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree)], check=True,
                       capture_output=True)
    try:
        for test in tests:  # tests not committed yet still run (arguments such as -k are not files)
            if test.startswith("tests/"):
                if tests_at is None:
                    shutil.copy(ROOT / test, tree / test)
                else:  # the tests as they were at a commit: a session of an older module's source
                    (tree / test).write_bytes(subprocess.run(["git", "-C", str(ROOT), "show", f"{tests_at}:{test}"],
                                                             check=True, capture_output=True).stdout)
        config = tree / "cosmic-ray.toml"
        if covering:  # each mutant runs only the tests that execute the lines it changed
            command = f"{sys.executable} {Path(__file__).resolve()} --covering-run {module} {' '.join(tests)}"
        else:
            command = f"{sys.executable} {PYTEST} {' '.join(tests)}"
        config.write_text(CONFIG.format(module=module, command=command.replace('"', '\\"')))
        if covering and not (tree / COVERING).exists():
            _map_covering_tests(tree, module, tests)
        if not resume:
            subprocess.run([sys.executable, "-m", "cosmic_ray.cli", "init", str(config), str(session)], cwd=tree,
                           check=True, capture_output=True)
            _set_aside_never_run(session, (tree / "src" / "trainperf" / module).read_text())
        subprocess.run([sys.executable, "-m", "cosmic_ray.cli", "exec", str(config), str(session)], cwd=tree,
                       check=True, capture_output=True)
        return (module, *_outcomes(session))
    finally:
        if not keep:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)


COVERING = "covering.json"


def _map_covering_tests(tree: Path, module: str, tests: tuple[str, ...]) -> None:
    """Run the module's tests once under coverage, with each test as a context, and keep which tests
    execute each line of the module (``""``: at import, outside any test) in ``tree/covering.json``."""
    from coverage import CoverageData

    rc, data = tree / ".coveragerc-mutation", tree / ".coverage-mutation"
    rc.write_text(f"[run]\ndynamic_context = test_function\ninclude = */trainperf/{module}\n")
    subprocess.run(f"env PYTHONPATH=src {sys.executable} -m coverage run --rcfile={rc} --data-file={data} "
                   f"{PYTEST.replace(' -x', '')} {' '.join(tests)}", shell=True, cwd=tree,
                   check=True, capture_output=True)
    covered = CoverageData(str(data))
    covered.read()
    by_line: dict[int, set[str]] = {}
    for measured in covered.measured_files():
        for line, contexts in (covered.contexts_by_lineno(measured) or {}).items():
            by_line.setdefault(line, set()).update(_node_id(c) for c in contexts)
    (tree / COVERING).write_text(json.dumps({str(k): sorted(v) for k, v in by_line.items()}))


def _node_id(context: str) -> str:
    """``test_mod.Class.test_name`` (coverage's test context) as ``tests/test_mod.py::Class::test_name``;
    ``""`` (code run at import) stays ``""``."""
    if not context:
        return ""
    module, *rest = context.split(".")
    return "::".join([f"tests/{module}.py", *rest])


def _statement_lines(source: str, line: int) -> range:
    """The lines of the innermost statement at ``line`` (of a compound statement, its header)."""
    best: ast.stmt | None = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno and (node.end_lineno or 0) <= (best.end_lineno or 0):
                best = node
    if best is None:
        return range(line, line + 1)
    body = getattr(best, "body", None)
    end = body[0].lineno - 1 if isinstance(body, list) and body and body[0].lineno > best.lineno else \
        (best.end_lineno or best.lineno)
    return range(best.lineno, max(end, line) + 1) if line <= end else range(line, line + 1)


def covering_run(module: str, tests: list[str]) -> int:
    """The test command of a ``--covering`` session (run in its worktree, the mutant applied): pytest on
    the tests that execute the changed lines; every test when one of them runs at import or is seen by
    no test."""
    path = f"src/trainperf/{module}"
    diff = subprocess.run(["git", "diff", "-U0", "--", path], capture_output=True, text=True, check=True).stdout
    original = subprocess.run(["git", "show", f"HEAD:{path}"], capture_output=True, text=True, check=True).stdout
    changed: set[int] = set()
    for start, count in re.findall(r"^@@ -(\d+)(?:,(\d+))? ", diff, re.MULTILINE):
        first, n = int(start), int(count) if count else 1
        changed.update(range(first, first + max(n, 1)))
    by_line: dict[str, list[str]] = json.loads(Path(COVERING).read_text())
    chosen: set[str] = set()
    for line in changed:
        for at in _statement_lines(original, line):
            chosen.update(by_line.get(str(at), ()))
    # At import, or seen by no test (code that coverage cannot trace, such as a profile function's
    # body, or code no test reaches): every test.
    node_ids = tests if "" in chosen or not chosen else sorted(chosen)
    return subprocess.run(f"{sys.executable} {PYTEST} {' '.join(node_ids)}", shell=True).returncode


def never_run_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The (start, end) positions (row from 1, column from 0) of code that never runs: annotations (every
    module has ``from __future__ import annotations``, so none is evaluated), ``@overload`` signatures
    (the last definition is the one called) and ``if TYPE_CHECKING:`` blocks."""
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []

    def span(node: ast.expr | ast.stmt) -> None:
        spans.append(((node.lineno, node.col_offset), (node.end_lineno or node.lineno, node.end_col_offset or 0)))

    def named(node: ast.expr, name: str) -> bool:  # ``name`` or ``module.name``
        return getattr(node, "id", getattr(node, "attr", None)) == name

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(named(d, "overload") for d in node.decorator_list):
                span(node)
                continue
            if node.returns is not None:
                span(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            span(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            span(node.annotation)
        elif isinstance(node, ast.If) and named(node.test, "TYPE_CHECKING"):
            for child in node.body:
                span(child)
    return spans


def _set_aside_never_run(session: Path, source: str) -> None:
    """Take the mutants that fall wholly inside code that never runs out of the session (they are
    equivalent by construction) and count them in a table of their own."""
    spans = never_run_spans(source)
    with sqlite3.connect(session) as db:
        rows = db.execute("SELECT job_id, start_pos_row, start_pos_col, end_pos_row, end_pos_col "
                          "FROM mutation_specs").fetchall()
        aside = [job for job, r0, c0, r1, c1 in rows
                 if any(a <= (r0, c0) and (r1, c1) <= b for a, b in spans)]
        db.execute("CREATE TABLE IF NOT EXISTS never_run (job_id VARCHAR PRIMARY KEY)")
        db.executemany("INSERT OR IGNORE INTO never_run VALUES (?)", [(j,) for j in aside])
        db.executemany("DELETE FROM mutation_specs WHERE job_id = ?", [(j,) for j in aside])
        db.executemany("DELETE FROM work_items WHERE job_id = ?", [(j,) for j in aside])


def _never_run(session: Path) -> int:
    with sqlite3.connect(session) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM never_run").fetchone()[0])
        except sqlite3.OperationalError:  # a session made before mutants were set aside
            return 0


def _outcomes(session: Path) -> tuple[int, int, list[str], int, int]:
    """(mutants run, killed, survivors, mutants in all, mutants set aside as never run) of a session."""
    with sqlite3.connect(session) as db:
        rows = db.execute(
            "SELECT m.operator_name, m.start_pos_row, m.occurrence, r.test_outcome FROM mutation_specs m "
            "JOIN work_results r ON r.job_id = m.job_id").fetchall()
        specs = db.execute("SELECT COUNT(*) FROM mutation_specs").fetchone()[0]
    survivors = [f"line {row} {op} #{occ}" for op, row, occ, outcome in rows if outcome == "SURVIVED"]
    killed = sum(1 for *_, outcome in rows if outcome == "KILLED")
    return len(rows), killed, sorted(survivors, key=lambda s: int(s.split()[1])), specs, _never_run(session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules under src/trainperf (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep each module's worktree and session here (read them "
                        "while it runs with --report; run again to resume)")
    parser.add_argument("--covering", action="store_true", help="run each mutant against only the tests that "
                        "execute the lines it changes (measured once with coverage per test): much faster")
    parser.add_argument("--tests-at", metavar="REV", help="take the tests as they were at commit REV (to retest "
                        "a kept session of the module's source before a later change)")
    parser.add_argument("--report", action="store_true", help="only print what the sessions under --keep hold")
    parser.add_argument("--retest", action="store_true", help="run the survivors of the sessions under --keep "
                        "again against the current tests (the module's source must not have changed)")
    if sys.argv[1:2] == ["--covering-run"]:  # the test command of a --covering session
        sys.exit(covering_run(sys.argv[2], sys.argv[3:]))
    args = parser.parse_args()
    chosen = args.modules or list(MODULES)
    unknown = [m for m in chosen if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; known: {', '.join(MODULES)}")
    keep = args.keep is not None
    work = args.keep.resolve() if keep else Path(tempfile.mkdtemp(prefix="trainperf-mutation-"))
    if args.report:
        if not keep:
            parser.error("--report reads the sessions under --keep DIR")
        results = [(m, *_outcomes(work / m.replace("/", "_") / "session.sqlite")) for m in chosen
                   if (work / m.replace("/", "_") / "session.sqlite").exists()]
    else:
        work.mkdir(parents=True, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda m: run_module(m, MODULES[m], work, keep, args.retest,
                                                                    args.covering, args.tests_at), chosen))
    for module, total, killed, survivors, specs, aside in results:
        share = 100.0 * killed / total if total else float("nan")
        pending = f" ({specs - total} of {specs} not run yet)" if specs > total else ""
        print(f"{module}: {killed} of {total} mutants killed ({share:.0f}%), {len(survivors)} survived{pending}; "
              f"{aside} more in annotations and other code that never runs, not run")
        for s in survivors:
            print(f"    {s}")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
