"""`make bench`: measure this project against baselines measured in the same run, print one table,
and write it to docs/performance.md with the machine it ran on.

Every row is a median over several runs (the count is in the row). Nothing here asserts a time:
targets are printed next to the figures, and a miss is reported, never hidden.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from embedded.function_logs import function_logs

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
#: Everything from this heading on in docs/performance.md is hand-written and survives a rerun.
NOTES_HEADING = "## Notes"
ENV = {
    **os.environ,
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "CDK_DISABLE_CLI_TELEMETRY": "true",
}


@dataclass(frozen=True)
class Row:
    """One line of the table: what was measured, ours, the baseline, the target and whether we met it."""

    what: str
    this: str
    baseline: str
    target: str = ""
    met: bool | None = None
    runs: int = 1

    def cells(self) -> list[str]:
        verdict = "" if self.met is None else ("met" if self.met else "MISSED")
        return [self.what, self.this, self.baseline, self.target, verdict, str(self.runs)]


def _median_seconds(command: Sequence[str], runs: int, cwd: Path = ROOT) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=ENV, check=True, capture_output=True)  # noqa: S603
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def synth_rows(runs: int, out: Path) -> list[Row]:
    """Synth wall time of one stage via the CLI, against a one-bucket app on the same versions.

    The stage's assembly stays in ``out / "app"`` (the cold imports run from its code assets).
    """
    ours = _median_seconds(
        [
            "npx",
            "--no-install",
            "cdk",
            "synth",
            "--app",
            f"{sys.executable} app.py",
            "-q",
            "--no-notices",
            "-c",
            "stage=dev",
            "-o",
            str(out / "app"),
        ],
        runs,
    )
    baseline = _median_seconds(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "synth", "-q", "--no-notices", "-o", str(out / "base")],
        runs,
        cwd=ROOT / "bench" / "baseline_app",
    )
    asset_rows = asset_size_rows(out / "app")
    ratio = ours / baseline
    return [
        Row(
            "synth wall time, one stage (4 stacks)",
            f"{ours:.1f} s",
            f"{baseline:.1f} s (one-bucket app)",
            "<= 1.5x baseline",
            ratio <= 1.5,
            runs,
        ),
        *asset_rows,
    ]


def asset_size_rows(cdk_out: Path) -> list[Row]:
    """Zipped size of the lambdas code asset from the synthesized assembly."""
    assets = [p for p in cdk_out.glob("**/asset.*") if p.is_dir() and (p / "lambdas").is_dir()]
    if not assets:
        return [Row("lambdas code asset (zipped)", "not found in cdk.out", "-")]
    files = sorted(file for file in assets[0].rglob("*") if file.is_file())
    sources = _zipped_size(assets[0], [file for file in files if file.suffix != ".pyc"])
    kb = f"{sources / 1024:.0f} KB"
    rows = [Row("lambdas code asset (zipped)", kb, "(absolute)", "< 300 KB", sources < 300 * 1024)]
    compiled = [file for file in files if file.suffix == ".pyc"]
    if compiled:  # the bytecode the synth compiled for the runtime (constructs_lib/bytecode.py)
        size = _zipped_size(assets[0], compiled)
        rows.append(Row("lambdas code asset: its bytecode (zipped, shipped as well)", f"{size / 1024:.0f} KB", "-"))
    return rows


def _zipped_size(root: Path, files: list[Path]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "asset.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for file in files:
                zipped.write(file, file.relative_to(root))
        return archive.stat().st_size


def import_rows(assembly: Path, runs: int) -> list[Row]:
    """Cold import of each handler module, as Lambda runs it, against `import boto3` alone (bench/cold_imports.py)."""
    from bench import cold_imports

    handlers = cold_imports.handlers_in(assembly)
    runtimes = sorted({h.runtime for h in handlers})
    if len(runtimes) != 1:
        raise ValueError(f"the functions run on one Python runtime, not {runtimes}")
    interpreter = cold_imports.runtime_interpreter(runtimes[0])
    measured = cold_imports.measure(handlers, runs, interpreter)
    boto3_ms = f"{measured.baseline * 1000:.0f} ms"
    compiled = cold_imports.holds_bytecode(handlers[0].asset, runtimes[0])
    rows = [
        Row(
            "cold import: interpreter",
            f"{interpreter.label}; the code asset {'holds its bytecode' if compiled else 'holds sources only'}",
            "-",
            runs=runs,
        ),
        Row("cold import: boto3 alone (baseline)", boto3_ms, "-", runs=runs),
    ]
    for module, seconds in measured.modules.items():
        ratio = seconds / measured.baseline
        rows.append(
            Row(
                f"cold import: {module}",
                f"{seconds * 1000:.0f} ms ({ratio:.2f}x)",
                f"{boto3_ms} (import boto3)",
                "<= 1.5x boto3",
                ratio <= 1.5,
                runs,
            )
        )
    return rows


def test_suite_rows() -> list[Row]:
    """`make test` wall time after install (one run: it is minutes long)."""
    seconds = _median_seconds(["make", "test"], 1)
    return [Row("make test wall time after install", f"{seconds:.0f} s", f"(absolute, {os.cpu_count()} cores)", runs=1)]


def e2e_rows(runs: int) -> list[Row]:
    """Wall time of the embedded end-to-end story."""
    story = ROOT / "tests" / "e2e" / "test_story.py"
    if not story.exists():
        return [Row("embedded end-to-end story", "not present", "-")]
    seconds = _median_seconds([PY, "-m", "pytest", "-q", "-n", "0", str(story)], runs)
    return [Row("embedded end-to-end story (pytest)", f"{seconds:.1f} s", "(absolute)", runs=runs)]


def store_rows() -> list[Row]:
    """DynamoDB requests per chat turn and per 10,000-turn cleanup (bench/store.py, on moto)."""
    from bench import store

    rows = []
    for item in store.run():
        requests, floor = item["requests"], item["floor"]
        measured_floor = item.get("floor_measured_backend", floor)
        by_operation = ", ".join(f"{op} {count:g}" for op, count in item["by_operation"].items())
        units = f"WRU moto {item['write_units_moto']:g}, model {item['write_units_model']:g}"
        rows.append(
            Row(
                f"DynamoDB: {item['benchmark']}",
                f"{requests} requests ({by_operation}); {units}",
                f"floor {measured_floor} on moto (1,000,000-byte pages); {floor} on DynamoDB (1 MiB pages)"
                if measured_floor != floor
                else f"floor {floor} requests",
                "at the floor",
                requests <= measured_floor,
            )
        )
    return rows


def module_rows(name: str, *args: Any) -> list[Row]:
    """The rows of ``bench.<name>.run(*args)``: each a Row or a dict of Row's fields."""
    module = importlib.import_module(f"bench.{name}")
    return [item if isinstance(item, Row) else Row(**item) for item in module.run(*args)]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        cpu = model
    except (OSError, StopIteration):
        pass
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()  # noqa: S607
    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), "
        f"Python {platform.python_version()}, Node {node}"
    )


def render(rows: Sequence[Row]) -> str:
    header = ["what", "this project", "baseline (same run)", "target", "verdict", "runs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


#: Each step of `make bench`: its progress label and what it measures, given the run count and the
#: scratch directory the steps share (synth leaves the stage's assembly there for the cold imports).
STEPS: dict[str, tuple[str, Callable[[int, Path], list[Row]]]] = {
    "synth": ("synth + asset", lambda runs, out: synth_rows(max(3, runs // 2), out)),
    "imports": ("imports", lambda runs, out: import_rows(out / "app", runs)),
    "cost": ("cost of 1,000 chat turns", lambda runs, out: module_rows("cost")),
    "store": ("store", lambda runs, out: store_rows()),
    "router": ("router", lambda runs, out: module_rows("router")),
    "message_path": ("message path", lambda runs, out: module_rows("message_path")),
    "streaming": ("streamed replies", lambda runs, out: module_rows("streaming")),
    "e2e": ("e2e", lambda runs, out: e2e_rows(3)),
    "synth_breakdown": ("synth breakdown", lambda runs, out: module_rows("synth_breakdown", max(3, runs // 2))),
    "local_startup": ("local startup", lambda runs, out: module_rows("local_startup", max(3, runs // 2), out / "app")),
    # Writes its own table into docs/capacity.md as well (bench/capacity_sim.py).
    "capacity": ("capacity simulation", lambda runs, out: module_rows("capacity_sim")),
}


def run_step(name: str, runs: int, out: Path) -> list[Row] | str:
    """One step in a fresh interpreter: its rows, or why it failed.

    Handler modules read their settings (and Powertools' Metrics its namespace) from the environment
    at first import, and each step sets the environment its handlers run in; in one process the
    first step to import a handler would fix it for every later one.
    """
    rows_file = out / f"rows-{name}.json"
    command = [sys.executable, "-m", "bench", "--step", name, "--runs", str(runs), "--out", str(out)]
    # The step's standard output is its handlers' log lines; its errors go to the terminal.
    done = subprocess.run(command, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, check=False)  # noqa: S603
    if done.returncode != 0 or not rows_file.exists():
        return f"exit {done.returncode}"
    return [Row(**row) for row in json.loads(rows_file.read_text())]


def step_main(name: str, runs: int, out: Path) -> int:
    """Inside the step's own interpreter: measure and leave the rows in the scratch directory."""
    _, measure = STEPS[name]
    with function_logs():
        rows = measure(runs, out)
    (out / f"rows-{name}.json").write_text(json.dumps([asdict(row) for row in rows]))
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=sorted(STEPS), help="measure one step (used by the full run)")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "5")))
    parser.add_argument("--out", type=Path, help="the steps' shared scratch directory")
    parser.add_argument("--with-suite", action="store_true", help="also time `make test` (minutes)")
    args = parser.parse_args(argv)
    if args.step:
        if args.out is None:
            parser.error("--step needs --out")
        return step_main(args.step, args.runs, args.out)
    names = list(STEPS)
    if args.with_suite or os.environ.get("BENCH_SUITE") == "1":
        names.append("suite")
    out = Path(tempfile.mkdtemp(prefix="bench-"))
    rows: list[Row] = []
    failed: list[str] = []
    try:
        for name in names:
            if name == "suite":
                print("measuring make test ...", file=sys.stderr, flush=True)
                rows += test_suite_rows()
                continue
            print(f"measuring {STEPS[name][0]} ...", file=sys.stderr, flush=True)
            result = run_step(name, args.runs, out)
            if isinstance(result, str):
                failed.append(f"{name} ({result})")
                rows.append(Row(f"{STEPS[name][0]}: the step failed ({result}), see its errors above", "-", "-"))
            else:
                rows += result
    finally:
        shutil.rmtree(out, ignore_errors=True)
    table = render(rows)
    print(table)
    if failed:
        # A partial table would replace the last whole one: docs/performance.md is left as it was.
        print(f"make bench: failed steps: {', '.join(failed)}; docs/performance.md not written", file=sys.stderr)
        return 1
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    target = ROOT / "docs" / "performance.md"
    target.write_text(
        "# Performance\n\n"
        f"Measured by `make bench` on {stamp}, on {machine()}.\n"
        "Each figure is the median of the runs shown; every baseline was measured in the same run.\n"
        "Each step runs in a fresh interpreter of its own (handlers read their settings at import).\n"
        "Cold imports run each handler module from its code asset in the assembly, in a fresh interpreter,\n"
        "in Lambda's environment (tracing on as deployed, no bytecode cache), and count CPU time:\n"
        "bench/cold_imports.py.\n"
        "`make bench` skips the `make test` row unless `BENCH_SUITE=1` (it runs the whole suite).\n\n"
        f"{table}\n" + kept_notes(target)
    )
    return 0


def kept_notes(page: Path) -> str:
    """The hand-written part of the page (from the ``## Notes`` heading on), kept across runs."""
    text = page.read_text() if page.exists() else ""
    start = text.find(NOTES_HEADING)
    return "\n" + text[start:] if start >= 0 else ""


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
