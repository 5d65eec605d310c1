"""The review-link handler on moto, called with API Gateway proxy events: pages, codes, no internals.

The full journeys (approve/reject/expire/double click/tampering, through a real execution) are in
tests/workflows/test_approval_gate.py; these cover the edges a workflow cannot reach.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from unittest import mock
from urllib.parse import parse_qsl, urlsplit

import boto3
import pytest

from constructs_lib.approval_gate.gate_runtime import decide as review
from constructs_lib.approval_gate.gate_runtime import environment as env
from constructs_lib.approval_gate.gate_runtime import signing
from constructs_lib.approval_gate.gate_runtime.records import ReviewStore
from tests.library.conftest import review_store
from tests.workflows.gate_harness import api_gateway_event, confirmation_form

SECRET = "z" * 64
KEY = SECRET.encode()
BASE = "https://api.example.test/prod"


class FakeContext:
    function_name = "review-links"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:review-links"
    aws_request_id = "req-1"


@pytest.fixture
def links(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReviewStore]:
    secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(Name="sig", SecretString=SECRET)
    monkeypatch.setenv("TABLE_NAME", table_name)
    monkeypatch.setenv("REVIEW_SECRET_ARN", secret["ARN"])
    env.reset()
    yield review_store(table_name)
    env.reset()


def open_link(url: str, form: str | None = None) -> dict[str, Any]:
    """GET the link (or POST ``form`` to it) through the handler."""
    parts = urlsplit(url)
    path = parts.path.removeprefix("/prod")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    result: dict[str, Any] = review.handler(api_gateway_event(path, query, form=form), FakeContext())
    return result


def click(url: str) -> dict[str, Any]:
    """What a reviewer does: open the link, then press the confirmation page's button."""
    shown = open_link(url)
    form = confirmation_form(shown["body"]) if shown["statusCode"] == 200 else None
    return shown if form is None else open_link(url, form)


def pending(store: ReviewStore, token: str = "token-1", lifetime: int = 600) -> tuple[str, int]:  # noqa: S107 - fake
    created = store.put_review({"n": 1}, requested_by="admin", expires_in_seconds=lifetime, task_token=token)
    return created.review_id, created.expires_at


def test_every_answer_is_a_small_hardened_html_page(links: ReviewStore) -> None:
    response = click(f"{BASE}/reviews/x/approve")

    assert response["statusCode"] == 403
    headers = response.get("multiValueHeaders") or {k: [v] for k, v in response["headers"].items()}
    assert headers["Content-Type"] == ["text/html; charset=utf-8"]
    assert headers["Cache-Control"] == ["no-store"]
    assert headers["Content-Security-Policy"] == ["default-src 'none'"]
    assert headers["Referrer-Policy"] == ["no-referrer"]
    assert response["body"].startswith("<!doctype html>")
    assert "<script" not in response["body"]


@pytest.mark.parametrize(
    "query",
    ["", "?exp=&sig=", "?exp=12ab&sig=AAAA", "?exp=-5&sig=AAAA", "?exp=1%2E5&sig=AAAA", "?exp=99999999999999999&sig=A"],
)
def test_missing_or_malformed_link_parameters_are_invalid_links(links: ReviewStore, query: str) -> None:
    review_id, _ = pending(links)

    response = click(f"{BASE}/reviews/{review_id}/approve{query}")

    assert response["statusCode"] == 403
    assert "Invalid link" in response["body"]
    stored = links.get_review(review_id)
    assert stored is not None
    assert stored.status == "pending_review"


def test_the_review_id_is_never_echoed_into_the_page(links: ReviewStore) -> None:
    evil = "<script>alert(1)</script>"
    url = signing.review_link(BASE, evil, "approve", int(time.time()) + 60, KEY)

    response = click(url)

    assert response["statusCode"] == 404
    assert "<script>" not in response["body"]


def test_a_decision_the_workflow_no_longer_waits_for_is_410(links: ReviewStore) -> None:
    # Given a pending review whose task token no execution knows (the execution was stopped)
    review_id, expires_at = pending(links, token="token-of-a-stopped-execution")

    # When the reviewer approves
    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.sfn") as client:
        client.return_value.send_task_success.side_effect = boto3.client(
            "stepfunctions", region_name="us-east-1"
        ).exceptions.InvalidToken({"Error": {"Code": "InvalidToken", "Message": "Invalid token"}}, "SendTaskSuccess")
        response = click(signing.review_link(BASE, review_id, "approve", expires_at, KEY))

    # Then the page says so (the decision stays recorded for the audit trail)
    assert response["statusCode"] == 410
    assert "No longer waiting" in response["body"]
    stored = links.get_review(review_id)
    assert stored is not None
    assert stored.status == "approved"


def test_approve_sends_the_checkpointed_state_and_reject_the_review_id(links: ReviewStore) -> None:
    approve_id, approve_exp = pending(links, token="t-approve")
    reject_id, reject_exp = pending(links, token="t-reject")

    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.sfn") as client:
        ok = click(signing.review_link(BASE, approve_id, "approve", approve_exp, KEY))
        no = click(signing.review_link(BASE, reject_id, "reject", reject_exp, KEY))

    assert ok["statusCode"] == 200
    assert no["statusCode"] == 200
    client.return_value.send_task_success.assert_called_once_with(taskToken="t-approve", output='{"n":1}')
    client.return_value.send_task_failure.assert_called_once_with(
        taskToken="t-reject", error="ReviewRejected", cause=reject_id
    )


def test_unexpected_errors_show_a_reference_not_internals(links: ReviewStore) -> None:
    review_id, expires_at = pending(links)

    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.store") as broken:
        broken.return_value.get_review.side_effect = RuntimeError("table arn:aws:dynamodb:... is on fire")
        response = click(signing.review_link(BASE, review_id, "approve", expires_at, KEY))

    assert response["statusCode"] == 500
    assert "Reference:" in response["body"]
    assert "fire" not in response["body"]
    assert "arn:" not in response["body"]


def test_other_paths_and_methods_are_html_404s(links: ReviewStore) -> None:
    response = click(f"{BASE}/reviews/abc/delete?exp=1&sig=x")

    assert response["statusCode"] == 404
    assert response["body"].startswith("<!doctype html>")


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_opening_a_link_shows_a_confirmation_and_changes_nothing(links: ReviewStore, action: str) -> None:
    # Given a pending review and its link, fetched as a mail scanner would (GET, any number of times)
    review_id, expires_at = pending(links, token="t-scan")
    url = signing.review_link(BASE, review_id, action, expires_at, KEY)
    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.sfn") as client:
        shown = [open_link(url) for _ in range(3)]

    # Then each GET is a page with one button that POSTs the signed fields, and nothing is decided
    for response in shown:
        assert response["statusCode"] == 200
        assert '<form method="post" action="">' in response["body"]
        assert response["headers"]["Content-Security-Policy"] == "default-src 'none'; form-action 'self'"
        assert review_id not in response["body"]
    client.return_value.send_task_success.assert_not_called()
    client.return_value.send_task_failure.assert_not_called()
    stored = links.get_review(review_id)
    assert stored is not None
    assert stored.status == "pending_review"

    # When the reviewer presses the button, the decision is recorded and sent
    with mock.patch("constructs_lib.approval_gate.gate_runtime.decide.sfn") as client:
        decided = open_link(url, confirmation_form(shown[0]["body"]))
    assert decided["statusCode"] == 200
    stored = links.get_review(review_id)
    assert stored is not None
    assert stored.status == ("approved" if action == "approve" else "rejected")


def test_a_post_with_a_forged_or_altered_form_is_an_invalid_link(links: ReviewStore) -> None:
    review_id, expires_at = pending(links)
    url = signing.review_link(BASE, review_id, "approve", expires_at, KEY)
    reject_sig = signing.sign(KEY, review_id, "reject", expires_at)
    bare = url.split("?", 1)[0]

    for form in (f"exp={expires_at}&sig={reject_sig}", f"exp={expires_at + 1}&sig=x", "", "sig=" + "A" * 5000):
        assert open_link(bare, form)["statusCode"] == 403
    stored = links.get_review(review_id)
    assert stored is not None
    assert stored.status == "pending_review"


def test_an_expired_link_says_so_on_opening(links: ReviewStore) -> None:
    review_id, _ = pending(links)
    url = signing.review_link(BASE, review_id, "approve", int(time.time()) - 1, KEY)
    assert open_link(url)["statusCode"] == 410
