"""Signed review links: HMAC-SHA256 over (review id, decision, expiry), one implementation.

The approval gate mails a reviewer two links, ``<base>/reviews/<id>/approve?exp=..&sig=..`` and
``.../reject?...``. The signature covers the review id, the decision and the expiry, so a link
cannot be forged, turned from reject into approve, pointed at another review, or stretched past
its expiry. The task token of the paused workflow is never part of a link (it stays on the
review record).

Usage::

    key = key_from_secret(aws.secret_value(secret_arn))          # cached Secrets Manager value
    url = review_link("https://api.example/prod", "r-1", "approve", 1767830400, key)
    ok = verify(key, "r-1", "approve", 1767830400, sig_from_query)  # constant-time
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from typing import Final
from urllib.parse import quote, urlencode

#: Decisions a link can carry; the path segment of the link.
DECISIONS: Final = ("approve", "reject")
#: Version tag inside the signed message, so a future format never verifies as this one.
_VERSION: Final = "review-link-v1"
#: Minimum key length in bytes (HMAC-SHA256: at least the hash size).
MIN_KEY_BYTES: Final = 32
_SIGNATURE_BYTES: Final = 32
#: 32 bytes in unpadded URL-safe base64: 43 characters.
_CANONICAL: Final = re.compile(r"[A-Za-z0-9_-]{43}")


class SigningKeyError(ValueError):
    """The signing secret is missing or too short; the message says what to fix."""


def _message(review_id: str, decision: str, expires_at: int) -> bytes:
    # JSON of a list is an unambiguous encoding: no separator inside an id can shift the fields.
    return json.dumps([_VERSION, review_id, decision, int(expires_at)], separators=(",", ":")).encode()


def _encode(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _decode(signature: str) -> bytes | None:
    """The digest of a signature in its one canonical spelling, else None.

    Canonical: 43 URL-safe base64 characters, no ``=`` padding, no ``+``/``/``, and the unused low
    bits of the last character zero, so one signature is one string (a link has one spelling).
    """
    if not isinstance(signature, str) or not _CANONICAL.fullmatch(signature):
        return None
    try:
        raw = base64.urlsafe_b64decode(signature + "=")
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == _SIGNATURE_BYTES and _encode(raw) == signature else None


def _check_key(key: bytes) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise SigningKeyError(f"the review signing key must be at least {MIN_KEY_BYTES} bytes (given {len(key)})")
    return key


def sign(key: bytes, review_id: str, decision: str, expires_at: int) -> str:
    """The link signature: URL-safe base64 (no padding) of HMAC-SHA256 over the three fields."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS} (given {decision!r})")
    digest = hmac.new(_check_key(key), _message(review_id, decision, expires_at), hashlib.sha256).digest()
    return _encode(digest)


def verify(key: bytes, review_id: str, decision: str, expires_at: int, signature: str) -> bool:
    """True only for the exact signature of these three fields, spelled canonically; constant time."""
    if decision not in DECISIONS:
        return False
    given = _decode(signature)
    if given is None:
        return False
    expected = hmac.new(_check_key(key), _message(review_id, decision, expires_at), hashlib.sha256).digest()
    return hmac.compare_digest(given, expected)


def review_link(base_url: str, review_id: str, decision: str, expires_at: int, key: bytes) -> str:
    """``<base_url>/reviews/<review_id>/<decision>?exp=<expires_at>&sig=<signature>``."""
    base = base_url.rstrip("/")
    query = urlencode({"exp": int(expires_at), "sig": sign(key, review_id, decision, expires_at)})
    return f"{base}/reviews/{quote(review_id, safe='')}/{decision}?{query}"


def key_from_secret(secret: str) -> bytes:
    """The signing key held by a secret's string value (UTF-8, at least 32 bytes)."""
    if not secret:
        raise SigningKeyError("the review signing secret is empty; store a random string of 32+ characters")
    return _check_key(secret.encode("utf-8"))
