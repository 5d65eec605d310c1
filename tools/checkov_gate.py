"""Run checkov over every synthesized template and fail on a finding the skip file does not accept.

`make checkov` calls ``python -m tools.checkov_gate cdk.out.all`` after `make synth-all`. checkov
(its CloudFormation framework, installed in its own virtual environment, ``.venv-checkov``) scans
each stage's templates in a process of its own, offline and unaffected by the caller's setup: no
platform API key, no ``.checkov.yaml``, no ``CKV_*`` option from the environment, no download of
guidelines or modules, no version check (:func:`checkov_command`, :func:`checkov_environment`).
Its JSON reports are kept as ``<outdir>/checkov-<stage>.json``.

Every failed check must be accepted by an entry of ``checkov-skips.yaml``::

    skips:
      - check: CKV_AWS_117                  # checkov's check id
        stages: [dev, prod]                 # every stage the entry covers
        resources:                          # stack -> logical ids (stable in this app)
          Api: [SessionApi32C3E802]
        reason: >-
          Why a security reviewer can accept this finding, and what holds instead.

The gate fails on a finding no entry lists, and on a listed (check, stage, stack, logical id)
that matches no finding any more, so the file never outlives what it excuses. checkov's own
skips (``checkov:skip`` metadata, ``--skip-check``) are refused: accepted findings live in one file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: Every stage is the CDK stage ``MangaAssist-<stage>`` (stacks/stage.py).
STAGE_PREFIX = "MangaAssist-"
DEFAULT_CHECKOV = Path(".venv-checkov/bin/checkov")
DEFAULT_SKIPS = Path("checkov-skips.yaml")
#: A reason shorter than this says nothing a reviewer could check.
MIN_REASON_LENGTH = 40
#: One checkov run per stage must finish within this (it takes about 10 s).
CHECKOV_TIMEOUT_SECONDS = 600

_CHECK_ID = re.compile(r"CKV2?_AWS_[0-9]+")
_LOGICAL_ID = re.compile(r"[A-Za-z0-9]+")
_ENTRY_KEYS = {"check", "stages", "resources", "reason"}


class GateError(Exception):
    """The input cannot be judged: checkov failed, a report or the skip file is malformed."""


@dataclass(frozen=True, order=True)
class Key:
    """One failed check on one resource: what a skip entry accepts."""

    check_id: str
    stage: str
    stack: str
    logical_id: str

    def __str__(self) -> str:
        return f"{self.check_id} {self.stage} {self.stack} {self.logical_id}"


@dataclass(frozen=True)
class StackTemplate:
    """A synthesized template, named the way the skip file names it."""

    stage: str
    stack: str
    path: Path

    @property
    def report_name(self) -> str:
        """How checkov's ``file_path`` ends for this template: ``<assembly dir>/<template file>``."""
        return "/".join(self.path.parts[-2:])

    def construct_paths(self) -> dict[str, str]:
        """Logical id -> construct path (``aws:cdk:path``), for messages a developer can act on."""
        resources = json.loads(self.path.read_text()).get("Resources", {})
        return {
            logical_id: resource.get("Metadata", {}).get("aws:cdk:path", "")
            for logical_id, resource in resources.items()
        }


@dataclass(frozen=True)
class Finding:
    key: Key
    check_name: str


@dataclass(frozen=True)
class Skip:
    """One entry of the skip file: one check on the listed resources, in every listed stage."""

    check_id: str
    stages: tuple[str, ...]
    resources: tuple[tuple[str, tuple[str, ...]], ...]
    reason: str

    def covered(self) -> Iterator[Key]:
        for stage in self.stages:
            for stack, logical_ids in self.resources:
                for logical_id in logical_ids:
                    yield Key(self.check_id, stage, stack, logical_id)


@dataclass(frozen=True)
class Verdict:
    accepted: list[Finding]
    unaccepted: list[Finding]
    stale: list[Key]

    @property
    def passed(self) -> bool:
        return not self.unaccepted and not self.stale


def stack_templates(outdir: Path) -> list[StackTemplate]:
    """Every stack template of every stage assembly in a cloud assembly directory (``cdk.out.all``)."""
    manifest = outdir / "manifest.json"
    if not manifest.is_file():
        raise GateError(f"{manifest} not found: synthesize first (make synth-all)")
    found = []
    for artifact in json.loads(manifest.read_text())["artifacts"].values():
        if artifact["type"] != "cdk:cloud-assembly":
            continue
        stage_name = artifact["properties"]["displayName"]
        if not stage_name.startswith(STAGE_PREFIX):
            raise GateError(f"stage assembly {stage_name!r} is not named {STAGE_PREFIX}<stage>")
        assembly = outdir / artifact["properties"]["directoryName"]
        nested = json.loads((assembly / "manifest.json").read_text())["artifacts"]
        found += [
            StackTemplate(
                stage=stage_name.removeprefix(STAGE_PREFIX),
                stack=stack["displayName"].rsplit("/", 1)[-1],
                path=assembly / stack["properties"]["templateFile"],
            )
            for stack in nested.values()
            if stack["type"] == "aws:cloudformation:stack"
        ]
    if not found:
        raise GateError(f"no stage assembly in {outdir}: synthesize the stages first (make synth-all)")
    return found


def parse_skips(data: Any, templates: Sequence[StackTemplate]) -> list[Skip]:
    """The skip file's entries, validated against the scanned stages and stacks.

    Raises GateError naming every malformed entry, and any resource listed twice for one check.
    """
    stages = {t.stage for t in templates}
    stacks = {t.stack for t in templates}
    if not isinstance(data, dict) or set(data) != {"skips"} or not isinstance(data["skips"], list):
        raise GateError("the skip file must be a mapping with one key, 'skips', holding a list of entries")
    errors: list[str] = []
    skips: list[Skip] = []
    for number, entry in enumerate(data["skips"], start=1):
        problems = _entry_problems(entry, stages, stacks)
        if problems:
            errors += [f"entry {number}: {problem}" for problem in problems]
            continue
        resources = tuple((stack, tuple(ids)) for stack, ids in entry["resources"].items())
        skips.append(Skip(entry["check"], tuple(entry["stages"]), resources, " ".join(entry["reason"].split())))
    seen: Counter[Key] = Counter(key for skip in skips for key in skip.covered())
    errors += [f"{key} is listed {count} times" for key, count in sorted(seen.items()) if count > 1]
    if errors:
        raise GateError("the skip file is malformed:\n  " + "\n  ".join(errors))
    return skips


def _entry_problems(entry: Any, stages: set[str], stacks: set[str]) -> list[str]:
    if not isinstance(entry, dict):
        return ["must be a mapping of check, stages, resources, reason"]
    problems = []
    if set(entry) != _ENTRY_KEYS:
        problems.append(f"keys must be exactly {sorted(_ENTRY_KEYS)} (given {sorted(map(str, entry))})")
    check = entry.get("check")
    if not isinstance(check, str) or not _CHECK_ID.fullmatch(check):
        problems.append(f"check must be a checkov AWS check id like CKV_AWS_117 (given {check!r})")
    listed = entry.get("stages")
    if not isinstance(listed, list) or not listed or not all(isinstance(s, str) and s in stages for s in listed):
        problems.append(f"stages must list scanned stages, some of {sorted(stages)} (given {listed!r})")
    resources = entry.get("resources")
    if not isinstance(resources, dict) or not resources:
        problems.append(f"resources must map a stack ({', '.join(sorted(stacks))}) to logical ids")
    else:
        for stack, ids in resources.items():
            if stack not in stacks:
                problems.append(f"resources: {stack!r} is not a scanned stack ({', '.join(sorted(stacks))})")
            if (
                not isinstance(ids, list)
                or not ids
                or not all(isinstance(i, str) and _LOGICAL_ID.fullmatch(i) for i in ids)
            ):
                problems.append(f"resources: {stack} must list logical ids (given {ids!r})")
    reason = entry.get("reason")
    if not isinstance(reason, str) or len(reason.strip()) < MIN_REASON_LENGTH:
        problems.append(f"reason must say why in at least {MIN_REASON_LENGTH} characters (given {reason!r})")
    return problems


def load_skips(path: Path, templates: Sequence[StackTemplate]) -> list[Skip]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise GateError(f"{path}: {err}") from err
    try:
        return parse_skips(data, templates)
    except GateError as err:
        raise GateError(f"{path}: {err}") from err


def report_findings(report: Any, templates: Sequence[StackTemplate]) -> list[Finding]:
    """The failed checks of one checkov JSON report (a framework's result, or a list of them).

    Raises GateError when checkov could not parse a template, skipped a check itself, reported
    on a file that is not one of ``templates``, or reported nothing for one of ``templates``.
    """
    by_name = {t.report_name: t for t in templates}
    results = report if isinstance(report, list) else [report]
    findings: list[Finding] = []
    reported: set[str] = set()
    for result in results:
        if not isinstance(result, dict) or result.get("check_type") != "cloudformation":
            raise GateError("not a checkov CloudFormation report (run it with --framework cloudformation -o json)")
        checks = result["results"]
        if result["summary"].get("parsing_errors"):
            raise GateError(f"checkov could not parse: {checks.get('parsing_errors')}")
        if checks.get("skipped_checks"):
            skipped = sorted({f"{c['check_id']} {c['resource']}" for c in checks["skipped_checks"]})
            raise GateError(f"checkov skipped checks itself ({', '.join(skipped)}): list them in the skip file instead")
        for check in checks.get("passed_checks", []) + checks.get("failed_checks", []):
            name = "/".join(Path(check["file_path"]).parts[-2:])
            if name not in by_name:
                raise GateError(f"checkov reported on {check['file_path']}, which is no synthesized template")
            reported.add(name)
        for check in checks.get("failed_checks", []):
            template = by_name["/".join(Path(check["file_path"]).parts[-2:])]
            _type, _, logical_id = check["resource"].partition(".")
            key = Key(check["check_id"], template.stage, template.stack, logical_id)
            findings.append(Finding(key, check["check_name"]))
    missing = sorted(set(by_name) - reported)
    if missing:
        raise GateError(f"checkov reported nothing for {', '.join(missing)}")
    return findings


def compare(findings: Sequence[Finding], skips: Sequence[Skip]) -> Verdict:
    """Which findings the skips accept, which they do not, and which skipped keys found nothing."""
    skipped = {key for skip in skips for key in skip.covered()}
    found = {finding.key for finding in findings}
    return Verdict(
        accepted=[f for f in findings if f.key in skipped],
        unaccepted=sorted((f for f in findings if f.key not in skipped), key=lambda f: f.key),
        stale=sorted(skipped - found),
    )


def checkov_command(checkov: Path, templates: Sequence[Path]) -> list[str]:
    """checkov over ``templates``: CloudFormation checks only, JSON on stdout, nothing downloaded.

    ``--soft-fail`` makes failed checks exit 0 (the gate judges them); a crash still exits 2.
    """
    return [
        str(checkov.absolute()),  # it runs in a directory of its own
        "--framework",
        "cloudformation",
        "--skip-download",
        "--soft-fail",
        "--compact",
        "--output",
        "json",
        "--file",
        *(str(path.resolve()) for path in templates),
    ]


def checkov_environment(home: Path) -> dict[str, str]:
    """The whole environment checkov runs with: nothing of the caller's but ``PATH`` and its bytecode prefix.

    ``home`` (an empty directory) is its home, temporary and working directory, so no
    ``.checkov.yaml`` is read; no ``BC_API_KEY`` reaches it, so it never talks to the platform.
    """
    # Bytecode: where the caller keeps it (the Makefile's ``.pycache/``), so that the processes after
    # the first load checkov's thousands of modules compiled; without a prefix, none is written.
    prefix = os.environ.get("PYTHONPYCACHEPREFIX", "")
    bytecode = {"PYTHONPYCACHEPREFIX": prefix} if prefix else {"PYTHONDONTWRITEBYTECODE": "1"}
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUTF8": "1",
        **bytecode,
        "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",  # no request for checkov's newest version
        "BC_SKIP_MAPPING": "TRUE",  # no download of check metadata and guidelines
    }


def run_checkov(checkov: Path, templates: Sequence[StackTemplate]) -> dict[str, Any]:
    """checkov's JSON report per stage, one process per stage, as many at once as there are cores."""
    if not os.access(checkov, os.X_OK):
        raise GateError(f"{checkov} not found: install it with make .venv-checkov/.installed")
    by_stage: dict[str, list[Path]] = {}
    for template in templates:
        by_stage.setdefault(template.stage, []).append(template.path)

    def scan(stage: str) -> Any:
        with tempfile.TemporaryDirectory(prefix="checkov-") as home:
            try:
                done = subprocess.run(  # noqa: S603 - our pinned checkov, arguments built here
                    checkov_command(checkov, by_stage[stage]),
                    env=checkov_environment(Path(home)),
                    cwd=home,
                    capture_output=True,
                    text=True,
                    timeout=CHECKOV_TIMEOUT_SECONDS,
                    check=False,
                )
            except subprocess.TimeoutExpired as err:
                raise GateError(f"checkov on stage {stage} ran longer than {CHECKOV_TIMEOUT_SECONDS} s") from err
        if done.returncode != 0:
            raise GateError(f"checkov on stage {stage} exited {done.returncode}:\n{done.stderr[-4000:]}")
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError as err:
            raise GateError(f"checkov on stage {stage} printed no JSON report: {done.stdout[:500]!r}") from err

    with ThreadPoolExecutor(max_workers=min(len(by_stage), os.cpu_count() or 1)) as pool:
        return dict(zip(by_stage, pool.map(scan, by_stage), strict=True))


def _describe(finding: Finding, construct_paths: Mapping[tuple[str, str], dict[str, str]]) -> str:
    key = finding.key
    path = construct_paths[(key.stage, key.stack)].get(key.logical_id, "")
    return f"{key} ({path}): {finding.check_name}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.checkov_gate", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="cloud assembly of every stage (cdk.out.all)")
    parser.add_argument("--checkov", type=Path, default=DEFAULT_CHECKOV, help=f"defaults to {DEFAULT_CHECKOV}")
    parser.add_argument("--skips", type=Path, default=DEFAULT_SKIPS, help=f"defaults to {DEFAULT_SKIPS}")
    args = parser.parse_args(argv)
    try:
        templates = stack_templates(args.outdir)
        skips = load_skips(args.skips, templates)
        reports = run_checkov(args.checkov, templates)
        findings: list[Finding] = []
        for stage, report in reports.items():
            (args.outdir / f"checkov-{stage}.json").write_text(json.dumps(report))
            findings += report_findings(report, [t for t in templates if t.stage == stage])
    except GateError as err:
        print(f"checkov gate: {err}", file=sys.stderr)
        return 2
    verdict = compare(findings, skips)
    construct_paths = {(t.stage, t.stack): t.construct_paths() for t in templates}
    for finding in verdict.unaccepted:
        print(f"checkov: not accepted: {_describe(finding, construct_paths)}", file=sys.stderr)
    for key in verdict.stale:
        print(f"{args.skips}: {key} matches no finding any more: remove it from its entry", file=sys.stderr)
    counts = Counter(f.key.check_id for f in verdict.accepted)
    print(
        f"checkov: {len(templates)} templates of {len(reports)} stages, {len(findings)} findings: "
        f"{len(verdict.accepted)} accepted by {args.skips} "
        f"({', '.join(f'{check} {n}' for check, n in sorted(counts.items()))}), "
        f"{len(verdict.unaccepted)} not accepted; {len(verdict.stale)} stale skips"
    )
    if verdict.unaccepted:
        print(
            f"Fix each finding in the CDK code, or accept it in {args.skips} with the reason "
            "(docs/security.md, section checkov).",
            file=sys.stderr,
        )
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
