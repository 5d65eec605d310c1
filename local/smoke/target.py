"""What the smoke runs against: a deployed stage (its stack outputs) or ``make local`` (its config route).

A deployed stage is found from the outputs ``make deploy`` wrote (``.deploy/outputs-<stage>.json``,
``tools.deploy.outputs_file``), from another outputs file, or from the four values given directly.
``make local`` is found from its ``GET /local/config``, which names its REST and WebSocket URLs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from local.smoke.client import WireError, cognito_endpoint

#: The outputs a smoke of a deployed stage reads (stacks/outputs.py names them).
REST_OUTPUT: Final = "RestApiBaseUrl"
WEBSOCKET_OUTPUT: Final = "WebSocketUrl"
POOL_OUTPUT: Final = "UserPoolId"
CLIENT_OUTPUT: Final = "UserPoolClientId"
#: Where ``make local`` listens unless told otherwise (docs/local.md).
LOCAL_ORIGIN: Final = "http://127.0.0.1:8300"


class TargetError(Exception):
    """The target cannot be worked out; the message says what is missing and how to give it."""


@dataclass(frozen=True)
class Target:
    """Where the smoke sends its calls, and how its users sign in."""

    #: ``deployed`` (a stage in an AWS account) or ``local`` (``make local``)
    kind: str
    stage: str
    rest_url: str
    websocket_url: str
    user_pool_id: str | None = None
    client_id: str | None = None
    region: str | None = None
    #: where Cognito's public ``InitiateAuth`` goes (the pool's regional endpoint unless given)
    cognito_endpoint: str | None = None
    #: ``make local``'s origin, for its sign-in and user routes
    local_origin: str | None = None
    #: where the values came from, for the report
    source: str = ""

    @property
    def deployed(self) -> bool:
        return self.kind == "deployed"


def read_outputs(path: Path, stage: str) -> dict[str, str]:
    """The stage's outputs in a CDK outputs file (``{stack name: {output: value}}``), merged over its stacks.

    Stacks of the stage (``MangaAssist-<stage>-...``, or the stage's assembly path) are read;
    a file that holds no such stack is read whole, so a file written for one stage with another
    naming still works.
    """
    if not path.exists():
        raise TargetError(
            f"no outputs file at {path}: deploy the stage first (make deploy STAGE={stage}), or give "
            "--outputs FILE, or --base-url, --ws-url, --user-pool-id and --client-id"
        )
    try:
        document = json.loads(path.read_text())
    except ValueError as error:
        raise TargetError(
            f"{path} is not JSON ({error}): it should be what `cdk deploy --outputs-file` writes"
        ) from None
    if not isinstance(document, dict) or not all(isinstance(v, dict) for v in document.values()):
        raise TargetError(f"{path} is not a CDK outputs file: expected {{stack name: {{output: value}}}}")
    prefixes = (f"MangaAssist-{stage}-", f"MangaAssist-{stage}/")
    stacks = {name: outputs for name, outputs in document.items() if name.startswith(prefixes)} or document
    merged: dict[str, str] = {}
    for outputs in stacks.values():
        merged.update({str(key): str(value) for key, value in outputs.items()})
    return merged


def region_of_pool(user_pool_id: str) -> str | None:
    """A Cognito pool id starts with its region (``eu-west-1_AbC``)."""
    region, sep, _ = user_pool_id.partition("_")
    return region if sep and region else None


def deployed_target(
    stage: str,
    *,
    outputs: dict[str, str] | None = None,
    source: str = "",
    base_url: str | None = None,
    ws_url: str | None = None,
    user_pool_id: str | None = None,
    client_id: str | None = None,
    region: str | None = None,
    default_region: str | None = None,
    endpoint: str | None = None,
) -> Target:
    """A deployed stage from its outputs, each value overridable by the one given directly.

    The pool's region is ``region`` when given, else the one its id starts with, else
    ``default_region`` (the stage's pinned region).
    """
    values = dict(outputs or {})
    rest = base_url or values.get(REST_OUTPUT)
    websocket = ws_url or values.get(WEBSOCKET_OUTPUT)
    missing = [
        name
        for name, value in ((f"{REST_OUTPUT} (--base-url)", rest), (f"{WEBSOCKET_OUTPUT} (--ws-url)", websocket))
        if not value
    ]
    if missing:
        raise TargetError(f"{source or 'the arguments'} name no {' and no '.join(missing)}")
    pool = user_pool_id or values.get(POOL_OUTPUT)
    client = client_id or values.get(CLIENT_OUTPUT)
    where = region or (region_of_pool(pool) if pool else None) or default_region
    cognito = endpoint or (cognito_endpoint(where) if where else None)
    for name, url, schemes in (("REST", rest, ("https://", "http://")), ("WebSocket", websocket, ("wss://", "ws://"))):
        if url is not None and not url.startswith(schemes):
            raise TargetError(f"the {name} URL must start with {' or '.join(schemes)} (given {url})")
    return Target(
        "deployed",
        stage,
        str(rest).rstrip("/"),
        str(websocket).rstrip("/"),
        user_pool_id=pool,
        client_id=client,
        region=where,
        cognito_endpoint=cognito,
        source=source or "the arguments",
    )


async def local_target(http: aiohttp.ClientSession, origin: str = LOCAL_ORIGIN) -> Target:
    """``make local`` at ``origin``, from the URLs its ``GET /local/config`` names."""
    url = f"{origin.rstrip('/')}/local/config"
    try:
        async with http.get(url) as response:
            status, text = response.status, await response.text()
    except (aiohttp.ClientError, TimeoutError) as error:
        raise WireError(f"GET {url}: is make local running? ({error!r})") from None
    try:
        config: Any = json.loads(text)
    except ValueError:
        config = None
    if status != 200 or not isinstance(config, dict) or "rest" not in config or "websocket" not in config:
        raise WireError(f"GET {url} answered {status} without the REST and WebSocket URLs: {text[:200]}")
    rest, websocket = str(config["rest"]), str(config["websocket"])
    return Target("local", rest.rsplit("/", 1)[-1], rest, websocket, local_origin=origin.rstrip("/"), source=url)
