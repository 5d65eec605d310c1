"""Where the synth of one stage spends its time, phase by phase, against the one-bucket app.

Run with ``python -m bench.synth_breakdown``. Every measurement runs in a fresh interpreter (this
module with ``--child``), as the CDK CLI runs ``app.py``, and reports each phase's wall time, CPU
time (this interpreter's and its jsii Node processes', read from /proc) and jsii round trips:

1. start: the jsii runtime (a Node process) and ``import aws_cdk``, which loads aws-cdk-lib into
   Node. The one-bucket app pays the same.
2. imports: the app's modules (stacks, constructs_lib, cdk_nag, the lambdas constants the stacks
   share with the code); for the one-bucket app, ``aws_cdk.aws_s3``.
3. construct tree: building the stage. Every call from Python into a CDK object (create, get,
   invoke) is a round trip to the jsii kernel; their count is the figure to watch.
4. prepare + templates: ``app.synth()`` up to the stage's validation plugins (aspects, token
   resolution, templates, asset staging). A marker plugin registered before cdk-nag ends it.
5. cdk-nag: the stage's AwsSolutions checks, between that marker and one after them.
6. report: the rest of ``app.synth()`` (validation report, tree metadata).

Beside the phases: CDK's built-in CloudFormation Validate (off for the app's stages, stacks/stage.py;
measured by a run with it on), the code asset's staging and hashing, the CDK CLI alone reading the
finished assembly (what ``cdk synth`` adds around the app), and the comparison like for like: the
one-bucket app keeps CDK's default and pays the validation engine's start, so it is also run without
it. CPU time is given next to wall time because it holds on a shared machine where wall time does not.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
CDK = str(ROOT / "node_modules" / ".bin" / "cdk")
STAGE = "dev"
#: What the CDK CLI adds to an app's context by default (cdk.json's context comes on top).
CLI_CONTEXT: dict[str, Any] = {
    "aws:cdk:enable-path-metadata": True,
    "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True,
    "aws:cdk:bundling-stacks": ["**"],
}
ENV = {
    **os.environ,
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "CDK_DISABLE_CLI_TELEMETRY": "true",
}


@dataclass(frozen=True)
class Sample:
    """Clocks at one instant: wall, this interpreter's CPU, its Node processes' CPU, jsii round trips."""

    wall: float
    python_cpu: float
    node_cpu: float
    jsii_calls: int


@dataclass(frozen=True)
class Phase:
    """The difference of two samples."""

    wall: float
    python_cpu: float
    node_cpu: float
    jsii_calls: int

    @property
    def cpu(self) -> float:
        return self.python_cpu + self.node_cpu

    @classmethod
    def between(cls, start: Sample, end: Sample) -> Phase:
        return cls(
            end.wall - start.wall,
            end.python_cpu - start.python_cpu,
            end.node_cpu - start.node_cpu,
            end.jsii_calls - start.jsii_calls,
        )


# ----------------------------------------------------------------------------------- the child


def descendants_cpu(pid: int) -> float:
    """CPU seconds (user + system) of every live descendant of ``pid`` (Linux /proc; 0 elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = defaultdict(list)
    seconds: dict[int, float] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return 0.0
    for entry in entries:
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        children[int(fields[1])].append(int(entry))
        seconds[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total, pending = 0.0, list(children[pid])
    while pending:
        found = pending.pop()
        total += seconds.get(found, 0.0)
        pending += children[found]
    return total


class Clocks:
    """Samples the clocks of this interpreter; counts jsii round trips once :meth:`count_jsii` ran."""

    def __init__(self) -> None:
        self.jsii_calls = 0
        self.marks: dict[str, Sample] = {"begin": self.sample()}

    def count_jsii(self) -> None:
        """Count every request the Python side sends to the jsii kernel (call before ``import aws_cdk``)."""
        from jsii._kernel.providers import process

        send = process._NodeProcess.send
        clocks = self

        def counted(self: Any, request: Any, response_type: Any) -> Any:
            clocks.jsii_calls += 1
            return send(self, request, response_type)

        process._NodeProcess.send = counted  # type: ignore[method-assign]

    def sample(self) -> Sample:
        return Sample(time.perf_counter(), time.process_time(), descendants_cpu(os.getpid()), self.jsii_calls)

    def mark(self, name: str) -> None:
        self.marks[name] = self.sample()

    def phases(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        ordered = ["begin", *names]
        return {
            name: asdict(Phase.between(self.marks[before], self.marks[name]))
            for before, name in itertools.pairwise(ordered)
        }


def _context() -> dict[str, Any]:
    # Imported here, not at the top: the child counts jsii requests from before aws_cdk loads.
    from stacks.project import cdk_json_context

    return {**cdk_json_context(), **CLI_CONTEXT, "stage": STAGE}


def _marker(name: str, on_validate: Callable[[], None]) -> Any:
    """A validation plugin that only notes when CDK reaches it (it reports success, no findings)."""
    import jsii
    from aws_cdk import IPolicyValidationPlugin, PolicyValidationPluginReport

    @jsii.implements(IPolicyValidationPlugin)
    class Marker:
        @property
        def name(self) -> str:
            return name

        @property
        def version(self) -> str | None:
            return None

        @property
        def rule_ids(self) -> list[str] | None:
            return None

        def validate(self, context: Any) -> PolicyValidationPluginReport:
            on_validate()
            return PolicyValidationPluginReport(success=True, violations=[])

    return Marker()


APP_PHASES = ("start", "imports", "construct", "templates", "nag", "report")
BASELINE_PHASES = ("start", "imports", "construct", "synth")


def child_app(outdir: str, cloudformation_validation: bool | None) -> dict[str, Any]:
    """Synthesize the stage as app.py does, marking each phase (runs in its own interpreter)."""
    clocks = Clocks()
    clocks.count_jsii()
    import aws_cdk

    clocks.mark("start")
    from constructs_lib import shared_function
    from stacks.config import load_stage_config
    from stacks.stage import BUILTIN_CLOUDFORMATION_VALIDATION, MangaAssistStage, nag_checks

    clocks.mark("imports")
    staging_seconds = _time_calls(shared_function.LambdaCode, "package")
    validation = BUILTIN_CLOUDFORMATION_VALIDATION if cloudformation_validation is None else cloudformation_validation
    cdk_app = aws_cdk.App(context=_context(), outdir=outdir, builtin_cloud_formation_validation=validation)
    stage = MangaAssistStage(cdk_app, load_stage_config(cdk_app.node.try_get_context("stages"), STAGE), nag=False)
    # The same checks the stage adds itself, between two markers that time them.
    aws_cdk.Validations.of(stage).add_plugins(
        _marker("bench-before-nag", lambda: clocks.mark("templates")),
        *nag_checks(stage),
        _marker("bench-after-nag", lambda: clocks.mark("nag")),
    )
    clocks.mark("construct")
    cdk_app.synth()
    clocks.mark("report")
    constructs = len(stage.node.find_all())
    return {
        "phases": clocks.phases(APP_PHASES),
        "constructs": constructs,
        "resources": _resources(Path(outdir)),
        "staging_seconds": sum(staging_seconds),
        "staging_calls": len(staging_seconds),
        "fingerprint": _fingerprint_probe(aws_cdk, Path(outdir)),
    }


def child_baseline(outdir: str, *, cloudformation_validation: bool = True) -> dict[str, Any]:
    """bench/baseline_app/app.py, phase by phase (the same four lines, with marks between them).

    ``cloudformation_validation=False`` is the like-for-like comparison: the app runs without
    CDK's built-in validation, the baseline app keeps CDK's default.
    """
    clocks = Clocks()
    clocks.count_jsii()
    import aws_cdk

    clocks.mark("start")
    from aws_cdk import aws_s3 as s3

    clocks.mark("imports")
    app = aws_cdk.App(
        context=dict(CLI_CONTEXT), outdir=outdir, builtin_cloud_formation_validation=cloudformation_validation
    )
    s3.Bucket(aws_cdk.Stack(app, "OneBucket"), "Bucket")
    clocks.mark("construct")
    app.synth()
    clocks.mark("synth")
    return {"phases": clocks.phases(BASELINE_PHASES), "resources": _resources(Path(outdir))}


def _time_calls(owner: Any, method: str) -> list[float]:
    """Wrap a classmethod so each call's duration is appended to the returned list."""
    durations: list[float] = []
    original = getattr(owner, method)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - started)

    setattr(owner, method, timed)
    return durations


def _resources(outdir: Path) -> int:
    return sum(
        len(json.loads(template.read_text()).get("Resources", {})) for template in outdir.rglob("*.template.json")
    )


def _fingerprint_probe(aws_cdk: Any, outdir: Path) -> dict[str, float]:
    """CDK's hashing and staging of the lambdas asset, once, then again from the same source.

    The synth staged the asset already and CDK caches staging by source path, so the probe stages
    a copy under a new path (a cache miss, as the synth's first stack had), then the same copy again.
    """
    staged = [p for p in outdir.glob("asset.*") if (p / "lambdas").is_dir()]
    if not staged:
        return {}
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "source"
        shutil.copytree(staged[0], source)
        probe = aws_cdk.App(outdir=str(Path(scratch) / "out"))
        stack = aws_cdk.Stack(probe, "Probe")
        seconds = []
        for n in range(2):
            started = time.perf_counter()
            aws_cdk.AssetStaging(stack, f"Code{n}", source_path=str(source))
            seconds.append(time.perf_counter() - started)
        files = sum(1 for f in source.rglob("*") if f.is_file())
        size = sum(f.stat().st_size for f in source.rglob("*") if f.is_file())
    return {"first": seconds[0], "cached": seconds[1], "files": files, "bytes": size}


def child_main(argv: Sequence[str]) -> int:
    kind, outdir = argv[0], argv[1]
    if kind.startswith("baseline"):
        result = child_baseline(outdir, cloudformation_validation=kind != "baseline-no-validation")
    else:
        result = child_app(outdir, cloudformation_validation=True if kind == "app-cfn-validate" else None)
    print("BENCH-RESULT " + json.dumps(result))
    return 0


# ----------------------------------------------------------------------------------- the parent


@dataclass(frozen=True)
class Run:
    """One child run: its own phases and what the parent measured around it."""

    result: dict[str, Any]
    wall: float
    cpu: float


def _run(command: Sequence[str], cwd: Path = ROOT) -> tuple[str, float, float]:
    """(stdout, wall seconds, CPU seconds of the command and everything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=ENV, check=True, capture_output=True, text=True)  # noqa: S603
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, wall, cpu


def _child(kind: str, outdir: Path) -> Run:
    stdout, wall, cpu = _run([PY, "-m", "bench.synth_breakdown", "--child", kind, str(outdir)])
    line = next(line for line in stdout.splitlines() if line.startswith("BENCH-RESULT "))
    return Run(json.loads(line.removeprefix("BENCH-RESULT ")), wall, cpu)


def _cli_alone(assembly: Path) -> tuple[float, float]:
    """The CDK CLI reading a finished assembly (``--app <dir>``): what ``cdk synth`` adds around an app."""
    _, wall, cpu = _run([CDK, "synth", "--app", str(assembly), "-q", "--no-notices", "-o", str(assembly)])
    return wall, cpu


def _median_phase(runs: Sequence[Run], name: str) -> Phase:
    phases = [Phase(**run.result["phases"][name]) for run in runs]
    return Phase(
        statistics.median(p.wall for p in phases),
        statistics.median(p.python_cpu for p in phases),
        statistics.median(p.node_cpu for p in phases),
        round(statistics.median(p.jsii_calls for p in phases)),
    )


def measure(runs: int = 3) -> dict[str, Any]:
    """Children for this app (as app.py synthesizes it), with CloudFormation Validate on (once), the baseline."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-synth-breakdown-"))
    try:
        ours, baseline, bare, cli_ours, cli_base = [], [], [], [], []
        for n in range(runs):
            ours.append(_child("app", scratch / f"app-{n}"))
            cli_ours.append(_cli_alone(scratch / f"app-{n}"))
            baseline.append(_child("baseline", scratch / f"base-{n}"))
            cli_base.append(_cli_alone(scratch / f"base-{n}"))
            bare.append(_child("baseline-no-validation", scratch / f"bare-{n}"))
        with_validation = _child("app-cfn-validate", scratch / "app-cfn").result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "ours": {name: _median_phase(ours, name) for name in APP_PHASES},
        "baseline": {name: _median_phase(baseline, name) for name in BASELINE_PHASES},
        "baseline_without_validation": {name: _median_phase(bare, name) for name in BASELINE_PHASES},
        "ours_total": (statistics.median(r.wall for r in ours), statistics.median(r.cpu for r in ours)),
        "baseline_total": (statistics.median(r.wall for r in baseline), statistics.median(r.cpu for r in baseline)),
        "with_validation": with_validation,
        "cli_ours": (statistics.median(w for w, _ in cli_ours), statistics.median(c for _, c in cli_ours)),
        "cli_baseline": (statistics.median(w for w, _ in cli_base), statistics.median(c for _, c in cli_base)),
        "facts": ours[-1].result,
        "baseline_facts": baseline[-1].result,
        "runs": runs,
    }


def _cell(phase: Phase, *, calls: bool = True) -> str:
    text = f"{phase.wall:.2f} s (CPU {phase.cpu:.2f} s: Python {phase.python_cpu:.2f}, Node {phase.node_cpu:.2f})"
    plural = "" if phase.jsii_calls == 1 else "s"
    return f"{text}; {phase.jsii_calls:,} jsii call{plural}" if calls else text


def _sum(phases: Mapping[str, Phase], names: Sequence[str]) -> Phase:
    picked = [phases[n] for n in names]
    return Phase(
        sum(p.wall for p in picked),
        sum(p.python_cpu for p in picked),
        sum(p.node_cpu for p in picked),
        sum(p.jsii_calls for p in picked),
    )


def rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows `make bench` prints (keys of bench.__main__.Row)."""
    ours: dict[str, Phase] = result["ours"]
    base: dict[str, Phase] = result["baseline"]
    facts, runs = result["facts"], result["runs"]
    on = result["with_validation"]["phases"]
    on_synth = sum(on[n]["wall"] for n in ("templates", "nag", "report"))
    on_cpu = sum(on[n]["python_cpu"] + on[n]["node_cpu"] for n in ("templates", "nag", "report"))
    off = _sum(ours, ("templates", "nag", "report"))
    probe = facts.get("fingerprint") or {}
    base_synth = base["synth"]
    cli_w, cli_c = result["cli_ours"]
    base_cli_w, base_cli_c = result["cli_baseline"]
    in_process = _sum(ours, APP_PHASES)
    base_in_process = _sum(base, BASELINE_PHASES)
    ours_cpu = in_process.cpu + cli_c
    base_cpu = base_in_process.cpu + base_cli_c
    bare_cpu = _sum(result["baseline_without_validation"], BASELINE_PHASES).cpu + base_cli_c
    per_resource = (ours["construct"].cpu + ours["templates"].cpu) / facts["resources"] * 1000
    row = _row_maker(runs)
    return [
        row(
            "synth phase 1: jsii runtime start, import aws_cdk (loads aws-cdk-lib into Node)",
            _cell(ours["start"], calls=False),
            _cell(base["start"], calls=False),
        ),
        row(
            "synth phase 2: app imports (stacks, constructs_lib, cdk_nag, shared lambdas constants)",
            _cell(ours["imports"], calls=False),
            _cell(base["imports"], calls=False) + " (aws_s3)",
        ),
        row(
            f"synth phase 3: construct tree ({facts['constructs']:,} constructs, {facts['resources']} resources)",
            _cell(ours["construct"]),
            _cell(base["construct"]) + f" ({result['baseline_facts']['resources']} resource)",
        ),
        row(
            "synth phase 4: prepare, resolve, write templates and assets",
            _cell(ours["templates"]),
            _cell(base_synth) + " (phases 4-6, incl. CDK's CloudFormation Validate, on by default)",
        ),
        row("synth phase 5: cdk-nag AwsSolutions checks", _cell(ours["nag"]), "- (no cdk-nag)"),
        row("synth phase 6: validation report, tree metadata", _cell(ours["report"]), "(in phase 4)"),
        row(
            "synth: CDK's built-in CloudFormation Validate",
            f"off (app.py; cfn-lint checks the same schemas). On, phases 4-6 take {on_synth:.2f} s "
            f"(CPU {on_cpu:.2f} s) instead of {off.wall:.2f} s (CPU {off.cpu:.2f} s)",
            "on (CDK's default)",
        ),
        row(
            "synth: lambdas code asset staging + hashing",
            f"Python staging {facts['staging_seconds'] * 1000:.0f} ms over {facts['staging_calls']} functions "
            f"(one staged directory); CDK hashing + copy of {probe.get('files', 0)} files "
            f"({probe.get('bytes', 0) / 1024:.0f} KB) {probe.get('first', 0) * 1000:.0f} ms once, "
            f"{probe.get('cached', 0) * 1000:.0f} ms from CDK's cache for every further stack",
            "-",
        ),
        row(
            "synth: CDK CLI alone (node start, reading the finished assembly)",
            f"{cli_w:.2f} s (CPU {cli_c:.2f} s)",
            f"{base_cli_w:.2f} s (CPU {base_cli_c:.2f} s)",
        ),
        row(
            "synth: CPU of phases 1-6 + CLI (steadier than wall time on a shared machine)",
            f"{ours_cpu:.2f} s ({ours_cpu / base_cpu:.2f}x)",
            f"{base_cpu:.2f} s (one-bucket app, CDK's defaults)",
        ),
        row(
            "synth: the same, like for like (neither runs CDK's CloudFormation Validate)",
            f"{ours_cpu:.2f} s ({ours_cpu / bare_cpu:.2f}x); the floor is the app's size: "
            f"{per_resource:.1f} ms of CPU per resource to build and write ({facts['resources']} resources)",
            f"{bare_cpu:.2f} s (one-bucket app without it)",
        ),
    ]


def _row_maker(runs: int) -> Callable[[str, str, str], dict[str, Any]]:
    def row(what: str, this: str, baseline: str) -> dict[str, Any]:
        return {"what": what, "this": this, "baseline": baseline, "runs": runs}

    return row


def run(runs: int = 3) -> list[dict[str, Any]]:
    return rows(measure(runs))


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    for item in run(int(argv[0]) if argv else 1):
        print(f"{item['what']}: {item['this']} | baseline {item['baseline']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
