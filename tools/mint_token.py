"""Mint a dev JWT for calling a deployed stage: ``python -m tools.mint_token --sub alice --role customer``.

The secret is the value of the stage's JWT signing secret (``aws secretsmanager get-secret-value``
on the ``JwtSecretArn`` output), given with ``--secret`` or the ``JWT_SECRET`` environment
variable. Issuer and audience default to the stage's configuration in cdk.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lambdas.shared.tokens import ROLES, mint
from stacks.config import StageConfig, load_stage_config

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def stage_config(name: str) -> StageConfig:
    """The stage's validated configuration from cdk.json."""
    stages = json.loads(CDK_JSON.read_text())["context"]["stages"]
    return load_stage_config(stages, name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mint_token", description=__doc__.splitlines()[0])
    parser.add_argument("--sub", required=True, help="subject: the customer, agent or admin id")
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--secret", default=os.environ.get("JWT_SECRET"), help="signing secret (or $JWT_SECRET)")
    parser.add_argument("--stage", default="dev", help="stage whose issuer/audience to use (default dev)")
    parser.add_argument("--issuer", help="overrides the stage's jwt_issuer")
    parser.add_argument("--audience", help="overrides the stage's jwt_audience")
    parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    args = parser.parse_args(argv)
    if not args.secret:
        parser.error("give the signing secret with --secret or JWT_SECRET")
    config = stage_config(args.stage)
    try:
        token = mint(
            sub=args.sub,
            role=args.role,
            secret=args.secret,
            issuer=args.issuer or config.jwt_issuer,
            audience=args.audience or config.jwt_audience,
            ttl_seconds=args.ttl,
        )
    except ValueError as err:
        parser.error(str(err))
    sys.stdout.write(token + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
