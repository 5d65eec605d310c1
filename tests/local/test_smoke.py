"""``make smoke`` (``local/smoke/``): the story over the wire, run against ``make local`` on loopback.

One server (``python -m local`` in a subprocess, on free ports, with no demo users, so the smoke
must bring everything it needs) serves the module. The story must pass, and everything it
created must be gone afterwards, also when a step fails on purpose. The dry run, the outputs
file and the Cognito side of a deployed stage are tested without the server: the dry run with
every network call refused, Cognito's admin APIs on moto, its public sign-in through a stub of
its JSON endpoint that answers from moto.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest
from aiohttp import web
from moto import mock_aws

from embedded.synth import ROOT
from local.smoke.__main__ import arguments, execute, main, plan
from local.smoke.client import COGNITO_INITIATE_AUTH, StageClient, Tokens, UserExists, WireError
from local.smoke.pause import PROMPT as PAUSE_PROMPT
from local.smoke.story import SmokeFailure, SmokeReport, SmokeStory
from local.smoke.target import TargetError, deployed_target, local_target, read_outputs
from local.smoke.users import CognitoUsers, LocalUsers, SmokeUser, new_run_id, plan_users
from tests.local.clients import Clients, subject
from tests.local.process import LocalProcess, local_server

pytestmark = pytest.mark.slow

#: Seconds between the local responder's tokens: a reply streams in several deltas, quickly.
TOKEN_DELAY = "0.01"
#: The test's own admin, who checks what the smoke left behind (the smoke's admin is gone by then).
INSPECTOR = "inspector@example.com"
OPERATOR_STEPS = ("cleanup_sweep", "no_background_errors", "handoff_escalates")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalProcess]:
    with local_server("--token-delay", TOKEN_DELAY, "--no-demo-users") as running:
        yield running
        code = running.stop()
        assert code == 0, f"python -m local exited {code} on SIGINT:\n{running.output}"
        assert "Traceback" not in running.output, running.output


def drive(server: LocalProcess, scenario: Callable[[Clients], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            return await scenario(Clients(http, server))

    return asyncio.run(run())


async def run_story(
    server: LocalProcess,
    story: type[SmokeStory] = SmokeStory,
    wrap: Callable[[LocalUsers], Any] = lambda users: users,
) -> SmokeReport:
    """The smoke story against the server, built from the product's parts (so a step can be made to fail)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        target = await local_target(http, server.origin)
        run_id = new_run_id()
        running = story(
            target,
            StageClient(http, target.rest_url, target.websocket_url),
            wrap(LocalUsers(http, server.origin)),
            run_id=run_id,
            users=plan_users(run_id),
            timeout=30,
        )
        return await running.run()


def assert_all_removed(server: LocalProcess, report: SmokeReport) -> None:
    """What the smoke created is gone: its users, its sockets; its session deleted, its agent retired."""
    created = report.created
    assert report.left_behind == [], report.left_behind

    async def check(c: Clients) -> None:
        admin = await c.token(INSPECTOR, "admin")
        for user in created.users:
            refused = await c.sign_in(user.email, user.password)
            assert refused.status == 401, (user.email, refused)
            again = await c._call("DELETE", f"{server.origin}/local/users", {"email": user.email})
            assert again.status == 404, (user.email, again)
        for session_id in created.sessions:
            session = await c.rest("GET", f"/sessions/{session_id}", admin)
            assert session.body["status"] in ("deleted", "archived"), session
        if created.agent_id is not None:
            agent = await c.rest("GET", f"/admin/agents/{created.agent_id}", admin)
            assert agent.body["status"] == "retired", agent

    drive(server, check)
    assert server.status()["connections_open"] == 0
    assert created.sockets == []


# ---------------------------------------------------------------------- against make local


def test_the_smoke_story_passes_against_make_local_and_removes_what_it_created(server: LocalProcess) -> None:
    # Given make local, and the command's own plan for it
    chosen = plan(arguments(["--local", server.origin, "--timeout", "30"]))
    lines: list[str] = []

    # When the smoke runs
    report = asyncio.run(execute(chosen, dry_run=False, say=lines.append))

    # Then every step a client can run passed; only the one that needs a moved clock was skipped
    assert report is not None
    output = "\n".join(lines)
    assert report.ok, output
    statuses = {result.spec.name: result.status for result in report.results}
    assert statuses.pop("handoff_escalates") == "skipped"
    assert set(statuses.values()) == {"passed"}, statuses
    assert f"Summary: {len(statuses)} passed, 1 skipped, 0 failed" in output
    assert "[ 6/21] The customer asks: the reply streams as deltas, then a final frame" in output
    assert "        called  POST /sessions -> 201 (as customer)" in output
    # and it says what it removed, and it is gone
    assert len(report.removed) == 4 + 2, report.removed  # four users, the session, the agent
    assert_all_removed(server, report)


def test_a_step_that_fails_mid_handoff_still_removes_everything(server: LocalProcess) -> None:
    # Given a story that fails while the agent serves the handoff: socket open, agent busy, session in handoff
    class FailsWhileTheAgentServes(SmokeStory):
        async def agent_replies(self) -> None:
            raise SmokeFailure("made to fail on purpose")

    # When it runs
    report = asyncio.run(run_story(server, FailsWhileTheAgentServes))

    # Then the failure ends the story and is reported, and the cleanup removed everything all the same
    failure = report.failure
    assert failure is not None
    assert (failure.spec.name, failure.reason) == ("agent_replies", "made to fail on purpose")
    after = report.results[failure.index :]
    assert {result.status for result in after} == {"not run"}, after
    assert not report.ok
    assert any(line.startswith("chat connection: closed") for line in report.removed), report.removed
    assert len(report.created.sessions) == 1
    assert_all_removed(server, report)


@pytest.mark.parametrize("delivered", ["swallowed by the step", "still to come"])
def test_a_ctrl_c_during_a_step_stops_the_story_before_the_next_step(server: LocalProcess, delivered: str) -> None:
    # Given a story whose chat opens as Ctrl-C comes: either the step's last wait swallows the
    # cancellation (as asyncio.wait_for does on Python 3.11 when the frame it waited for came at the
    # same moment), or the signal comes after that wait, so the cancellation waits for the next await
    class CtrlCWhileTheChatOpens(SmokeStory):
        async def connect(self) -> None:
            await super().connect()
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            if delivered == "swallowed by the step":
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)

    # When it runs
    report = asyncio.run(run_story(server, CtrlCWhileTheChatOpens))

    # Then the step passed, no later step ran, the run says it was interrupted, and the cleanup ran
    statuses = [(result.spec.name, result.status) for result in report.results]
    opened = [name for name, _ in statuses].index("connect")
    assert statuses[opened] == ("connect", "passed")
    assert {status for _, status in statuses[opened + 1 :]} == {"not run"}, statuses
    assert report.interrupted
    assert not report.ok
    assert_all_removed(server, report)


def test_a_user_whose_creation_fails_midway_is_removed_with_the_others(server: LocalProcess) -> None:
    # Given a directory that creates the agent and then fails (as a create that breaks after its first call)
    class BreaksAfterTheAgent:
        def __init__(self, users: LocalUsers) -> None:
            self.users = users
            self.description, self.sign_in_description = users.description, users.sign_in_description

        async def create(self, user: SmokeUser) -> None:
            await self.users.create(user)
            if user.role == "agent":
                raise WireError("made to fail after creating the agent")

        async def delete(self, user: SmokeUser) -> bool:
            return await self.users.delete(user)

        async def sign_in(self, email: str, password: str) -> Tokens:
            return await self.users.sign_in(email, password)

    # When the story runs
    report = asyncio.run(run_story(server, wrap=BreaksAfterTheAgent))

    # Then it stopped at the first step, and the three users it made are gone; the admin was never made
    failure = report.failure
    assert failure is not None
    assert (failure.spec.name, failure.reason) == ("create_users", "made to fail after creating the agent")
    assert [user.label for user in report.created.users] == ["customer", "other", "agent"]
    assert [line.rsplit(": ", 1)[1] for line in report.removed] == ["deleted"] * 3, report.removed
    assert_all_removed(server, report)


def test_ctrl_c_stops_the_story_and_still_removes_what_it_created(server: LocalProcess) -> None:
    # Given make smoke's command running against make local, pausing after each step: the Ctrl-C
    # comes at the step this test chooses, however far a busy machine lets the reader fall behind
    command = [sys.executable, "-m", "local.smoke", "--local", server.origin, "--timeout", "30", "--pause"]
    process = subprocess.Popen(  # noqa: S603 - our own module
        command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdin is not None
    assert process.stdout is not None
    lines: list[str] = []
    step = ""

    # When Ctrl-C comes once the chat is open (a session exists, the socket is open): Enter at the
    # pause after each earlier step, Ctrl-C at the pause after step 5
    for line in process.stdout:
        lines.append(line)
        step = line[:7] if line.startswith("[") else step
        if line.rstrip("\n") != PAUSE_PROMPT:
            continue
        if step == "[ 5/21]":
            process.send_signal(signal.SIGINT)
        else:
            process.stdin.write("\n")
            process.stdin.flush()
    process.stdin.close()
    process.wait(timeout=60)
    output = "".join(lines)
    assert "[ 5/21]" in output
    assert "[ 6/21]" not in output, output

    # Then it stops with 130, says so, and removed its users and its session all the same
    assert process.returncode == 130, output
    assert "Interrupted (Ctrl-C): the story stopped, and the cleanup ran." in output
    assert "Traceback" not in output, output
    emails = re.findall(r"user (smoke-\S+@example\.com) \(\w+\): deleted", output)
    assert len(emails) == 4, output
    (session_id,) = re.findall(r"saw     session (\S+), active", output)

    async def check(c: Clients) -> None:
        for email in emails:
            gone = await c._call("DELETE", f"{server.origin}/local/users", {"email": email})
            assert gone.status == 404, (email, gone)
        session = await c.rest("GET", f"/sessions/{session_id}", await c.token(INSPECTOR, "admin"))
        assert session.body["status"] == "deleted", session

    drive(server, check)
    assert server.status()["connections_open"] == 0


def test_read_only_signs_in_an_existing_user_and_writes_nothing(server: LocalProcess) -> None:
    # Given an existing customer, named by the environment
    email = "read-only@example.com"
    token = drive(server, lambda c: c.token(email, "customer"))
    environ = {"SMOKE_EMAIL": email, "SMOKE_PASSWORD": "Local-Passw0rd!"}
    chosen = plan(arguments(["--local", server.origin, "--read-only", "--timeout", "30"]), environ)
    lines: list[str] = []

    # When the read-only smoke runs
    report = asyncio.run(execute(chosen, dry_run=False, say=lines.append))

    # Then its three steps passed, it created nothing, and the customer still has no session
    assert report is not None
    assert report.ok, "\n".join(lines)
    assert [result.status for result in report.results] == ["passed"] * 3
    assert (report.removed, report.created.users, report.created.sessions) == ([], [], [])

    async def sessions(c: Clients) -> Any:
        return await c.rest("GET", f"/customers/{subject(token)}/sessions", token)

    listing = drive(server, sessions)
    assert (listing.status, listing.body["sessions"]) == (200, [])


# ---------------------------------------------------------------------- the dry run, without a server

OUTPUTS = {
    "MangaAssist-dev-Api": {
        "RestApiBaseUrl": "https://a1b2c3.execute-api.eu-west-1.amazonaws.com/dev/",
        "WebSocketUrl": "wss://d4e5f6.execute-api.eu-west-1.amazonaws.com/dev",
        "DashboardUrl": "https://console.aws.amazon.com/...",
    },
    "MangaAssist-dev-Storage": {
        "UserPoolId": "eu-west-1_AbCdEf123",
        "UserPoolClientId": "client0123",
        "TableName": "t",
    },
    "MangaAssist-prod-Api": {
        "RestApiBaseUrl": "https://p1.execute-api.eu-west-1.amazonaws.com/prod/",
        "WebSocketUrl": "wss://p2/prod",
    },
    "MangaAssist-prod-Storage": {"UserPoolId": "eu-west-1_Prod1", "UserPoolClientId": "prodclient"},
}


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    path = tmp_path / "outputs-dev.json"
    path.write_text(json.dumps(OUTPUTS))
    return path


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection or name lookup fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a network call in a dry run: {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.usefixtures("no_network")
def test_dry_run_of_a_deployed_stage_prints_urls_users_and_steps_without_a_network_call(
    outputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--stage", "dev", "--outputs", str(outputs), "--dry-run"]) == 0

    printed = capsys.readouterr().out
    assert f"Smoke of stage dev, deployed (from {outputs})" in printed
    assert "  REST API   https://a1b2c3.execute-api.eu-west-1.amazonaws.com/dev\n" in printed
    assert "  WebSocket  wss://d4e5f6.execute-api.eu-west-1.amazonaws.com/dev\n" in printed
    assert (
        "InitiateAuth (USER_PASSWORD_AUTH) at https://cognito-idp.eu-west-1.amazonaws.com/, app client client0123"
        in printed
    )
    assert "Cognito pool eu-west-1_AbCdEf123 in eu-west-1 with your AWS credentials" in printed
    created = [line.split()[0] for line in printed.splitlines() if line.startswith("  smoke-")]
    assert [email.split("-", 2)[2] for email in created] == [
        "customer@example.com",
        "other@example.com",
        "agent@example.com",
        "admin@example.com",
    ]
    assert "retire it afterwards" in printed
    steps = [line for line in printed.splitlines() if line.startswith("  [")]
    assert len(steps) == 21
    skipped = [line for line in steps if "] skip " in line]
    assert len(skipped) == 3, skipped
    assert "POST /admin/cleanup sweeps every ended session of the stage" in skipped[0]
    assert "the dashboard (DashboardUrl)" in skipped[1]
    assert "needs the clock moved past handoff_agent_wait_seconds" in skipped[2]


@pytest.mark.usefixtures("no_network")
def test_dry_run_of_make_local_says_where_its_urls_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--local", "--dry-run"]) == 0

    printed = capsys.readouterr().out
    assert "read from http://127.0.0.1:8300/local/config when it runs" in printed
    assert "make local's http://127.0.0.1:8300/local/users (POST to create, DELETE to delete)" in printed
    steps = [line for line in printed.splitlines() if line.startswith("  [")]
    assert [line.split("]")[0].strip(" [") for line in steps if "] skip " in line] == ["21/21"]


@pytest.mark.usefixtures("no_network")
def test_dry_run_read_only_of_prod_signs_in_with_credentials_and_creates_nobody(
    outputs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMOKE_EMAIL", "oncall-probe@example.com")
    monkeypatch.setenv("SMOKE_PASSWORD", "not printed")

    assert main(["--stage", "prod", "--outputs", str(outputs), "--read-only", "--dry-run"]) == 0

    printed = capsys.readouterr().out
    assert "  REST API   https://p1.execute-api.eu-west-1.amazonaws.com/prod\n" in printed  # prod's stacks only
    assert "AdminInitiateAuth (ADMIN_USER_PASSWORD_AUTH) with your credentials, app client prodclient" in printed
    assert "Signs in the existing user oncall-probe@example.com ($SMOKE_EMAIL); creates and deletes nothing." in printed
    assert "not printed" not in printed
    assert len([line for line in printed.splitlines() if line.startswith("  [")]) == 3


def test_fails_a_production_stage_unless_read_only(outputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stage", "prod", "--outputs", str(outputs), "--dry-run"]) == 2
    assert "stage prod retains its data" in capsys.readouterr().err


def test_fails_read_only_without_the_user_in_the_environment(
    outputs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SMOKE_EMAIL", raising=False)
    assert main(["--stage", "dev", "--outputs", str(outputs), "--read-only", "--dry-run"]) == 2
    assert "set $SMOKE_EMAIL and $SMOKE_PASSWORD" in capsys.readouterr().err


def test_fails_without_outputs_and_says_how_to_get_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "outputs-dev.json"
    assert main(["--stage", "dev", "--outputs", str(missing), "--dry-run"]) == 2
    assert f"no outputs file at {missing}: deploy the stage first (make deploy STAGE=dev)" in capsys.readouterr().err


# ---------------------------------------------------------------------- the outputs file


def test_outputs_file_is_read_for_the_stage_only(outputs: Path) -> None:
    read = read_outputs(outputs, "dev")
    assert read["RestApiBaseUrl"] == OUTPUTS["MangaAssist-dev-Api"]["RestApiBaseUrl"]
    assert read["UserPoolId"] == "eu-west-1_AbCdEf123"

    target = deployed_target("dev", outputs=read, source=str(outputs))
    assert target.rest_url == "https://a1b2c3.execute-api.eu-west-1.amazonaws.com/dev"  # no trailing slash
    assert target.websocket_url == "wss://d4e5f6.execute-api.eu-west-1.amazonaws.com/dev"
    assert (target.user_pool_id, target.client_id, target.region) == ("eu-west-1_AbCdEf123", "client0123", "eu-west-1")
    assert target.cognito_endpoint == "https://cognito-idp.eu-west-1.amazonaws.com/"


def test_values_given_directly_win_over_the_outputs(outputs: Path) -> None:
    target = deployed_target(
        "dev",
        outputs=read_outputs(outputs, "dev"),
        base_url="https://other.example.com/dev/",
        client_id="client9",
        endpoint="http://127.0.0.1:9229/",
    )
    assert (target.rest_url, target.client_id) == ("https://other.example.com/dev", "client9")
    assert target.cognito_endpoint == "http://127.0.0.1:9229/"
    assert target.websocket_url == "wss://d4e5f6.execute-api.eu-west-1.amazonaws.com/dev"


def test_fails_an_outputs_file_without_the_urls(tmp_path: Path) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({"MangaAssist-dev-Storage": {"UserPoolId": "eu-west-1_x"}}))
    with pytest.raises(TargetError, match=r"name no RestApiBaseUrl \(--base-url\) and no WebSocketUrl \(--ws-url\)"):
        deployed_target("dev", outputs=read_outputs(path, "dev"), source=str(path))
    path.write_text("{not json")
    with pytest.raises(TargetError, match="is not JSON"):
        read_outputs(path, "dev")
    with pytest.raises(TargetError, match=r"must start with https:// or http:// \(given ftp://x\)"):
        deployed_target("dev", base_url="ftp://x", ws_url="wss://y")


# ---------------------------------------------------------------------- Cognito, as on a deployed stage


@pytest.fixture
def pool() -> Iterator[dict[str, str]]:
    """A user pool like a stage's (e-mail user names, the three role groups, a password client) on moto."""
    with mock_aws():
        cognito = boto3.client("cognito-idp", region_name="us-east-1")
        pool_id = cognito.create_user_pool(PoolName="smoke", UsernameAttributes=["email"])["UserPool"]["Id"]
        for role in ("customer", "agent", "admin"):
            cognito.create_group(UserPoolId=pool_id, GroupName=role)
        client_id = cognito.create_user_pool_client(
            UserPoolId=pool_id,
            ClientName="app",
            ExplicitAuthFlows=["ALLOW_USER_PASSWORD_AUTH", "ALLOW_ADMIN_USER_PASSWORD_AUTH"],
        )["UserPoolClient"]["ClientId"]
        yield {"pool": pool_id, "client": client_id}


@asynccontextmanager
async def cognito_users(pool: dict[str, str], endpoint: str, sign_in: str) -> AsyncIterator[CognitoUsers]:
    async with aiohttp.ClientSession() as http:
        yield CognitoUsers(
            http,
            user_pool_id=pool["pool"],
            client_id=pool["client"],
            region="us-east-1",
            endpoint=endpoint,
            sign_in=sign_in,
            session=boto3.session.Session(region_name="us-east-1"),
        )


def test_cognito_users_are_created_unverified_in_their_group_and_deleted(pool: dict[str, str]) -> None:
    cognito = boto3.client("cognito-idp", region_name="us-east-1")
    agent = plan_users(new_run_id())[2]

    async def scenario() -> None:
        async with cognito_users(pool, "http://unused.invalid/", "admin") as users:
            await users.create(agent)
            made = cognito.admin_get_user(UserPoolId=pool["pool"], Username=agent.email)
            attributes = {a["Name"]: a["Value"] for a in made["UserAttributes"]}
            assert (attributes["email"], attributes["email_verified"]) == (agent.email, "false")
            groups = cognito.admin_list_groups_for_user(UserPoolId=pool["pool"], Username=agent.email)["Groups"]
            assert [g["GroupName"] for g in groups] == ["agent"]
            with pytest.raises(UserExists):
                await users.create(agent)
            tokens = await users.sign_in(agent.email, agent.password)  # AdminInitiateAuth
            assert tokens.role == "agent"
            assert await users.delete(agent) is True
            assert await users.delete(agent) is False

    asyncio.run(scenario())


@asynccontextmanager
async def cognito_endpoint_stub(answer: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]) -> AsyncIterator[str]:
    """Cognito's public JSON endpoint on loopback: checks the call's shape, answers with ``answer(body)``."""

    async def initiate_auth(request: web.Request) -> web.Response:
        assert request.headers["X-Amz-Target"] == COGNITO_INITIATE_AUTH
        assert request.headers["Content-Type"] == "application/x-amz-json-1.1"
        assert "Authorization" not in request.headers  # a public call: nothing signed
        status, body = answer(json.loads(await request.text()))
        return web.Response(status=status, text=json.dumps(body), content_type="application/x-amz-json-1.1")

    app = web.Application()
    app.router.add_post("/", initiate_auth)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


def test_public_sign_in_is_cognitos_unsigned_json_call(pool: dict[str, str]) -> None:
    cognito = boto3.client("cognito-idp", region_name="us-east-1")

    def moto_answers(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            answer = cognito.initiate_auth(**body)
        except cognito.exceptions.NotAuthorizedException as error:
            return 400, {"__type": "NotAuthorizedException", "message": error.response["Error"]["Message"]}
        answer.pop("ResponseMetadata", None)
        return 200, answer

    customer = plan_users(new_run_id())[0]

    async def scenario() -> None:
        async with cognito_endpoint_stub(moto_answers) as endpoint, cognito_users(pool, endpoint, "public") as users:
            await users.create(customer)
            tokens = await users.sign_in(customer.email, customer.password)
            assert (tokens.role, tokens.email) == ("customer", customer.email)
            with pytest.raises(WireError, match=f"Cognito refused the sign-in of {customer.email}: NotAuthorized"):
                await users.sign_in(customer.email, "wrong-Passw0rd!")

    asyncio.run(scenario())


def test_public_sign_in_refused_by_an_srp_only_client_says_what_to_use() -> None:
    def srp_only(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 400, {
            "__type": "InvalidParameterException",
            "message": "USER_PASSWORD_AUTH flow not enabled for this client",
        }

    async def scenario() -> None:
        async with cognito_endpoint_stub(srp_only) as endpoint, aiohttp.ClientSession() as http:
            users = CognitoUsers(http, user_pool_id="eu-west-1_x", client_id="c", region="eu-west-1", endpoint=endpoint)
            with pytest.raises(WireError, match="use --sign-in admin with AWS credentials"):
                await users.sign_in("someone@example.com", "Passw0rd!")

    asyncio.run(scenario())
