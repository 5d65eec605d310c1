"""Deploy, diff or destroy one stage with the CDK CLI, after the checks a deployer would forget.

Usage (``make deploy STAGE=dev``, ``make diff STAGE=prod``, ``make destroy STAGE=dev``)::

    python -m tools.deploy deploy --stage dev [--dry-run] [--skip-preflight] [-- extra cdk arguments]

* ``deploy`` first runs the preflight (``tools/preflight.py``: model, quotas, SES, bootstrap, ...
  with the deployer's credentials) and stops on a blocker; ``--skip-preflight`` or
  ``SKIP_PREFLIGHT=1`` skips it, and says so.
* ``deploy`` and ``diff`` address the stage's four stacks (``MangaAssist-<stage>/*``). Deploy asks
  before any IAM or security-group broadening (``--require-approval broadening``) and writes the
  stacks' outputs to ``.deploy/outputs-<stage>.json`` (git-ignored; outside ``cdk.out``, which
  every ``make synth`` deletes).
* A production stage (``removal_policy: retain``) must pin ``account`` and ``region`` in
  cdk.json's ``context.stages.<stage>``: an environment-agnostic prod would deploy wherever the
  caller's credentials point.
* ``destroy`` refuses a production stage: its data is retained and its table is protected, so a
  destroy could only half succeed; disposable stages are destroyed with ``--force``.

``--dry-run`` prints the commands instead of running them (what the tests check). The CDK CLI is
the one in node_modules (``npx --no-install``), the version package-lock.json pins.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from stacks.config import ConfigError, StageConfig, load_stage_config

ROOT = Path(__file__).resolve().parent.parent
CDK = ("npx", "--no-install", "cdk")
ACTIONS = ("deploy", "diff", "destroy")
#: Where ``deploy`` keeps each stage's stack outputs: not in cdk.out, which ``make synth`` deletes.
OUTPUTS_DIR = ".deploy"
#: Set to 1 to deploy without the preflight (``make deploy SKIP_PREFLIGHT=1``).
SKIP_PREFLIGHT = "SKIP_PREFLIGHT"


def outputs_file(stage: str) -> Path:
    """The stage's outputs as ``make deploy`` last wrote them: ``{stack name: {output: value}}``."""
    return ROOT / OUTPUTS_DIR / f"outputs-{stage}.json"


class Refused(Exception):
    """The action must not run for this stage; the message says why and what to do."""


def stage_config(name: str) -> StageConfig:
    """The stage's validated configuration from cdk.json (ConfigError explains a bad value)."""
    stages = json.loads((ROOT / "cdk.json").read_text())["context"].get("stages")
    return load_stage_config(stages, name)


def command(action: str, config: StageConfig, extra: Sequence[str] = ()) -> list[str]:
    """The CDK CLI command for ``action`` on the stage; Refused when the stage must not get it."""
    name = config.name
    if action not in ACTIONS:
        raise Refused(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")
    if config.is_production and action != "diff" and (config.account is None or config.region is None):
        raise Refused(
            f'stage {name} retains its data, so it must pin where it goes: set "account" and '
            f'"region" in cdk.json under context.stages.{name}'
        )
    if action == "destroy" and config.is_production:
        raise Refused(
            f"stage {name} retains its data (removal_policy retain, deletion protection): destroy is for "
            "disposable stages; delete a production stage's stacks deliberately in the console"
        )
    app = f"{shlex.quote(sys.executable)} app.py"  # the interpreter that runs this tool has the app's packages
    base = [*CDK, action, f"MangaAssist-{name}/*", "--app", app, "-c", f"stage={name}"]
    if action == "deploy":
        base += ["--require-approval", "broadening", "--outputs-file", f"{OUTPUTS_DIR}/outputs-{name}.json"]
    if action == "destroy":
        base += ["--force"]
    return base + list(extra)


def preflight_command(config: StageConfig) -> list[str]:
    """The preflight ``deploy`` runs first, as a command line (what ``--dry-run`` prints)."""
    return [sys.executable, "-m", "tools.preflight", "--stage", config.name]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.deploy", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("--stage", default="dev", help="the stage in cdk.json's context.stages (default dev)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    parser.add_argument(
        "--skip-preflight", action="store_true", help=f"deploy without the preflight (or {SKIP_PREFLIGHT}=1)"
    )
    parser.add_argument("extra", nargs="*", help="further arguments for the CDK CLI (after --)")
    args = parser.parse_args(argv)
    try:
        config = stage_config(args.stage)
        cmd = command(args.action, config, args.extra)
    except (ConfigError, Refused) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.action == "deploy":
        if args.skip_preflight or os.environ.get(SKIP_PREFLIGHT, "") not in ("", "0"):
            print(
                f"Preflight skipped ({SKIP_PREFLIGHT}): nothing checked the account before this deploy.",
                file=sys.stderr,
            )
        else:
            print("+ " + shlex.join(preflight_command(config)), file=sys.stderr)
            if not args.dry_run:
                from tools import preflight

                if preflight.main(["--stage", config.name]) != 0:
                    print(
                        f"error: the preflight found a blocker, so stage {config.name} was not deployed "
                        f"({SKIP_PREFLIGHT}=1 deploys anyway)",
                        file=sys.stderr,
                    )
                    return 1
    print("+ " + shlex.join(cmd), file=sys.stderr)
    if args.dry_run:
        return 0
    if args.action == "deploy":
        outputs_file(config.name).parent.mkdir(exist_ok=True)
    return subprocess.run(cmd, cwd=ROOT, check=False).returncode  # noqa: S603


if __name__ == "__main__":
    sys.exit(main())
