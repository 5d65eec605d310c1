"""Review links: ``.../reviews/{id}/approve`` and ``.../reviews/{id}/reject`` from the e-mail.

A reviewer clicks a link sent by the approval gate's request step (:mod:`.request`). The ``GET``
of a link changes nothing: mail security gateways and link previews fetch every URL in a message,
so a GET only checks the signature and expiry and shows a confirmation page whose button POSTs the
same signed fields to the same address. The ``POST`` checks the link's HMAC signature (constant
time) and expiry again, records the decision
with the records' conditional ``decide_review`` (only a pending review whose ``expires_at`` has
not passed; TTL deletion lags by up to 48 h, so it is never trusted), then completes the paused
workflow's task token (kept on the review record) with success (the checkpointed state is the
task's output) or failure (error ``ReviewRejected``, cause the review id). A person reads the
answer, so every answer is a small HTML page, never JSON and never internals:

| case | status |
|---|---|
| GET of a valid, unexpired link: the confirmation page (nothing recorded) | 200 |
| POST: approved / rejected | 200 |
| signature missing, malformed, forged or altered | 403 "invalid link" |
| unknown review (valid signature, no record) | 404 |
| already decided (second click, the other link) | 409 |
| link or review expired; workflow no longer waiting | 410 |
| anything unexpected | 500 with the request id |

The order of checks means a forged link never reaches DynamoDB and an expired one never reaches
Step Functions. If recording succeeded but completing the token failed (throttling, a crash),
clicking the same link again answers 409 and delivers the recorded decision to the workflow
again; Step Functions completes a task at most once, so the workflow is never resumed twice.

The gate creates this function (``HumanApprovalGate.decision_function``) and mounts it on a REST
API with ``add_review_routes`` (GET and POST, no authorizer: the signature is the credential). It
answers API Gateway (REST, v1) Lambda proxy events; any path ending in ``/reviews/{id}/approve|reject``.
The POST takes ``exp`` and ``sig`` from its form body (``application/x-www-form-urlencoded``), or
from the query string when the body lacks them.
Environment (the construct sets all of it):
    TABLE_NAME and the key layout variables: as for :mod:`.request`.
    REVIEW_SECRET_ARN: the gate's signing secret (``HumanApprovalGate.signing_secret``).
"""

from __future__ import annotations

import base64
import binascii
import html
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, unquote

from botocore.exceptions import ClientError

from . import environment as env
from . import signing
from .records import KeyLayout, Review, ReviewExpired, ReviewNotFound, ReviewNotPending, ReviewStatus, ReviewStore

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

#: Error name the rejected task fails with; the gate's Catch routes it to the rejection path.
REJECTED_ERROR: Final = "ReviewRejected"
_OUTCOME: Final = {"approve": ReviewStatus.APPROVED, "reject": ReviewStatus.REJECTED}
# Step Functions' answers for a token whose task is over (completed, timed out, aborted).
_TASK_OVER: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})
_SECRET_MAX_AGE: Final = 300
_MAX_EXP_DIGITS: Final = 12
# The link's path, wherever the caller mounted the routes: .../reviews/<id>/<decision>.
_LINK_PATH: Final = re.compile(r"/reviews/([^/]+)/(approve|reject)/?\Z")


@dataclass(frozen=True)
class Settings:
    table_name: str
    secret_arn: str


@env.once
def settings() -> Settings:
    return Settings(table_name=env.require("TABLE_NAME"), secret_arn=env.require("REVIEW_SECRET_ARN"))


@env.once
def store() -> ReviewStore:
    return ReviewStore(settings().table_name, layout=KeyLayout.from_environment())


@env.once
def sfn() -> Any:
    return env.client("stepfunctions", max_attempts=5)


def signing_key() -> bytes:
    return signing.key_from_secret(env.secret_value(settings().secret_arn, max_age=_SECRET_MAX_AGE))


# ---------------------------------------------------------------------------- pages

_PAGES: Final[dict[str, tuple[int, str, str]]] = {
    "approved": (200, "Approved", "Thank you. The request was approved and the workflow continues."),
    "rejected": (200, "Rejected", "Thank you. The request was rejected; the requester will be told."),
    "invalid": (403, "Invalid link", "This link is not valid. Use the link from the e-mail exactly as sent."),
    "unknown": (404, "Unknown review", "There is no such review (it may have been removed after it expired)."),
    "already_approved": (409, "Already decided", "This request was already approved. Nothing was changed."),
    "already_rejected": (409, "Already decided", "This request was already rejected. Nothing was changed."),
    "expired": (410, "Link expired", "This link has expired. The request was treated as rejected."),
    "not_waiting": (410, "No longer waiting", "This request is no longer waiting for a decision."),
    "not_found": (404, "Not found", "There is nothing at this address."),
    "error": (500, "Something went wrong", "The decision could not be recorded. Please try the link again later."),
}
#: Every page kind, for tests and for anyone adding one.
PAGE_KINDS: Final = tuple(_PAGES)


def page(kind: str, *, detail: str | None = None) -> dict[str, Any]:
    """A small, self-contained HTML page (escaped text, no scripts, no external resources)."""
    status, title, text = _PAGES[kind]
    paragraphs = f"<p>{html.escape(text)}</p>"
    if detail:
        paragraphs += f"<p>{html.escape(detail)}</p>"
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1>{paragraphs}</body></html>"
    )
    return {
        "statusCode": status,
        "body": body,
        "isBase64Encoded": False,
        "headers": {
            "Content-Type": "text/html; charset=utf-8",
            "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'none'",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
        },
    }


_CONFIRM: Final = {
    "approve": ("Approve this request?", "Nothing has been decided yet. Press the button to approve the request."),
    "reject": ("Reject this request?", "Nothing has been decided yet. Press the button to reject the request."),
}
#: The confirmation page may post its form back to where it came from, and nowhere else.
_CONFIRM_POLICY: Final = "default-src 'none'; form-action 'self'"
#: A form body larger than this is not a review decision (two short fields).
_MAX_FORM_BYTES: Final = 1024


def confirmation_page(action: str, expires_at: int, signature: str) -> dict[str, Any]:
    """The page a link's GET shows: one button that POSTs the signed fields to the same address.

    The form's ``action`` is empty (the page's own URL), so the id never appears in the page.
    """
    title, text = _CONFIRM[action]
    button = "Approve" if action == "approve" else "Reject"
    form = (
        '<form method="post" action="">'
        f'<input type="hidden" name="exp" value="{int(expires_at)}">'
        f'<input type="hidden" name="sig" value="{html.escape(signature, quote=True)}">'
        f'<button type="submit">{button}</button></form>'
    )
    response = page("invalid")  # the hardened shell; status, title and body replaced below
    response["statusCode"] = 200
    response["headers"]["Content-Security-Policy"] = _CONFIRM_POLICY
    response["body"] = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{form}</body></html>"
    )
    return response


# ---------------------------------------------------------------------------- domain


def parse_expiry(raw: str | None) -> int | None:
    """The ``exp`` query value as epoch seconds, or None when absent or not a plain number."""
    if raw is None or not raw.isascii() or not raw.isdigit() or len(raw) > _MAX_EXP_DIGITS:
        return None
    return int(raw)


def complete(review: Review, decision: ReviewStatus) -> bool:
    """Hand the decision to the paused workflow; False when its task is already over."""
    if not review.task_token:
        raise RuntimeError(f"review {review.review_id} holds no task token")
    try:
        if decision == ReviewStatus.APPROVED:
            sfn().send_task_success(taskToken=review.task_token, output=review.state)
        else:
            sfn().send_task_failure(taskToken=review.task_token, error=REJECTED_ERROR, cause=review.review_id)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in _TASK_OVER:
            return False
        raise
    return True


def _valid_link(review_id: str, action: str, exp_raw: str | None, sig: str | None) -> int | None:
    """The link's expiry when its signature holds, else None (logged)."""
    exp = parse_expiry(exp_raw)
    if exp is None or not sig or not signing.verify(signing_key(), review_id, action, exp, sig):
        logger.warning("review link refused: bad signature (review %r, %s)", review_id[:64], action)
        return None
    return exp


def confirm(review_id: str, action: str, exp_raw: str | None, sig: str | None) -> dict[str, Any]:
    """A link's GET: the confirmation page for a valid, unexpired link; reads and writes nothing."""
    exp = _valid_link(review_id, action, exp_raw, sig)
    if exp is None or sig is None:
        return page("invalid")
    if time.time() >= exp:
        return page("expired")
    return confirmation_page(action, exp, sig)


def decide(review_id: str, action: str, exp_raw: str | None, sig: str | None, decided_by: str) -> dict[str, Any]:
    """Verify, record, resume: the whole decision, as a page for the person who clicked."""
    exp = _valid_link(review_id, action, exp_raw, sig)
    if exp is None:
        return page("invalid")
    if time.time() >= exp:
        return page("expired")
    review = store().get_review(review_id)
    if review is None:
        return page("unknown")
    if review.expires_at != exp:
        logger.warning("review link refused: expiry differs from the record (review %s)", review_id)
        return page("invalid")
    outcome = _OUTCOME[action]
    try:
        decided = store().decide_review(review_id, outcome, decided_by=decided_by)
    except ReviewNotFound:
        return page("unknown")
    except ReviewExpired:
        return page("expired")
    except ReviewNotPending as err:
        return _second_click(review, outcome, err.status)
    if not complete(decided, outcome):
        logger.warning("decision on review %s recorded but the workflow no longer waits", review_id)
        return page("not_waiting")
    logger.info("review %s decided: %s", review_id, outcome)
    return page("approved" if outcome == ReviewStatus.APPROVED else "rejected")


def _second_click(review: Review, outcome: ReviewStatus, status: str) -> dict[str, Any]:
    """409 for a decided review; the same decision is delivered again in case the first failed."""
    if status == ReviewStatus.EXPIRED:
        return page("expired")
    if status == outcome:
        # Repairs a first click whose SendTask call failed after the record changed; Step
        # Functions refuses it (TaskDoesNotExist/InvalidToken) when the task is already over.
        try:
            if complete(review, outcome):
                logger.warning("recorded decision on review %s delivered on a repeated click", review.review_id)
        except Exception:
            logger.exception("redelivery of the recorded decision on review %s failed", review.review_id)
    return page("already_approved" if status == ReviewStatus.APPROVED else "already_rejected")


# ---------------------------------------------------------------------------- routes


def _caller(event: dict[str, Any]) -> str:
    identity = (event.get("requestContext") or {}).get("identity") or {}
    source_ip = identity.get("sourceIp")
    return f"review-link from {source_ip}" if source_ip else "review-link"


def _form(event: dict[str, Any]) -> dict[str, str]:
    """The POST's form fields (``exp``, ``sig``); empty when the body is absent or not a small form."""
    body = event.get("body")
    if not isinstance(body, str) or len(body) > _MAX_FORM_BYTES * 2:
        return {}
    if event.get("isBase64Encoded"):
        try:
            body = base64.b64decode(body, validate=True).decode("ascii")
        except (binascii.Error, ValueError):
            return {}
    if len(body) > _MAX_FORM_BYTES:
        return {}
    return {name: value for name, value in parse_qsl(body) if name in ("exp", "sig")}


def route(event: dict[str, Any]) -> dict[str, Any]:
    """The page for one API Gateway proxy event: a review link, or 404 for anything else."""
    match = _LINK_PATH.search(str(event.get("path") or ""))
    method = event.get("httpMethod")
    if method not in ("GET", "POST") or match is None:
        return page("not_found")
    params = event.get("queryStringParameters") or {}
    # API Gateway passes the raw path; links percent-encode the id (UUIDs need no encoding anyway).
    review_id, action = unquote(match.group(1)), match.group(2)
    if method == "GET":
        return confirm(review_id, action, params.get("exp"), params.get("sig"))
    fields = _form(event) or params
    return decide(review_id, action, fields.get("exp"), fields.get("sig"), _caller(event))


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        return route(event)
    except Exception:
        logger.exception("review link failed")
        request_id = (event.get("requestContext") or {}).get("requestId")
        return page("error", detail=f"Reference: {request_id}" if request_id else None)
