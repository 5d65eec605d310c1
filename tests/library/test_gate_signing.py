"""Review link signing: HMAC-SHA256 over (review id, decision, expiry), verified in constant time."""

from __future__ import annotations

import base64
import hmac
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constructs_lib.approval_gate.gate_runtime import signing

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def test_a_signature_verifies_for_exactly_its_fields() -> None:
    sig = signing.sign(KEY, "review-1", "approve", 1_767_830_400)

    assert signing.verify(KEY, "review-1", "approve", 1_767_830_400, sig)
    assert not signing.verify(KEY, "review-2", "approve", 1_767_830_400, sig)
    assert not signing.verify(KEY, "review-1", "reject", 1_767_830_400, sig)
    assert not signing.verify(KEY, "review-1", "approve", 1_767_830_401, sig)
    assert not signing.verify(OTHER_KEY, "review-1", "approve", 1_767_830_400, sig)


def test_field_boundaries_cannot_be_shifted() -> None:
    # "a" + "b,c" must not sign the same message as "a,b" + "c" (JSON-array encoding)
    assert signing.sign(KEY, 'a","approve', "reject", 1) != signing.sign(KEY, "a", "approve", 1)


@pytest.mark.parametrize("bad", ["", "x", "!!!!", "A" * 43 + "=", "A" * 44, "A" * 200, "é" * 43])
def test_malformed_signatures_are_refused_without_raising(bad: str) -> None:
    assert not signing.verify(KEY, "review-1", "approve", 1, bad)


def test_unknown_decisions_neither_sign_nor_verify() -> None:
    with pytest.raises(ValueError, match="decision must be one of"):
        signing.sign(KEY, "review-1", "maybe", 1)
    assert not signing.verify(KEY, "review-1", "maybe", 1, signing.sign(KEY, "review-1", "approve", 1))


def test_comparison_is_constant_time() -> None:
    sig = signing.sign(KEY, "review-1", "approve", 5)
    with mock.patch(
        "constructs_lib.approval_gate.gate_runtime.signing.hmac.compare_digest", wraps=hmac.compare_digest
    ) as compare:
        assert signing.verify(KEY, "review-1", "approve", 5, sig)
    compare.assert_called_once()


def test_short_keys_are_refused_with_the_fix() -> None:
    with pytest.raises(signing.SigningKeyError, match="at least 32 bytes"):
        signing.sign(b"short", "review-1", "approve", 1)
    with pytest.raises(signing.SigningKeyError, match="empty"):
        signing.key_from_secret("")
    assert signing.key_from_secret("s" * 40) == b"s" * 40


def test_review_link_carries_id_decision_expiry_and_signature_only() -> None:
    url = signing.review_link("https://api.example/prod/", "rev/1 ?", "reject", 99, KEY)

    parts = urlsplit(url)
    assert parts.scheme == "https"
    assert parts.netloc == "api.example"
    assert parts.path == "/prod/reviews/rev%2F1%20%3F/reject"
    query = parse_qs(parts.query)
    assert set(query) == {"exp", "sig"}
    assert query["exp"] == ["99"]
    assert signing.verify(KEY, "rev/1 ?", "reject", 99, query["sig"][0])


@settings(max_examples=300, deadline=None)
@given(
    review_id=st.text(min_size=1, max_size=64),
    decision=st.sampled_from(signing.DECISIONS),
    expires_at=st.integers(min_value=0, max_value=10**11),
    signature=st.text(max_size=64),
)
def test_random_signatures_never_verify(review_id: str, decision: str, expires_at: int, signature: str) -> None:
    if signature == signing.sign(KEY, review_id, decision, expires_at):
        return  # the one right answer (never drawn in practice)
    assert not signing.verify(KEY, review_id, decision, expires_at, signature)


@settings(max_examples=200, deadline=None)
@given(review_id=st.text(min_size=1, max_size=64), expires_at=st.integers(min_value=0, max_value=10**11))
def test_a_reject_signature_never_approves(review_id: str, expires_at: int) -> None:
    sig = signing.sign(KEY, review_id, "reject", expires_at)
    assert signing.verify(KEY, review_id, "reject", expires_at, sig)
    assert not signing.verify(KEY, review_id, "approve", expires_at, sig)


def _respellings(sig: str) -> list[str]:
    """Other strings that decode to the same 32 bytes: padded, standard alphabet, low bits set."""
    raw = base64.urlsafe_b64decode(sig + "=")
    standard = base64.b64encode(raw).decode()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(sig[-1])
    low_bits = [sig[:-1] + alphabet[last | bits] for bits in (1, 2, 3) if last | bits != last]
    return [sig + "=", standard, standard.rstrip("="), *low_bits]


@pytest.mark.parametrize("review_id", ["review-1", "r", "a" * 64])
def test_only_the_canonical_spelling_of_a_signature_verifies(review_id: str) -> None:
    for expires_at in range(1_767_830_400, 1_767_830_440):
        sig = signing.sign(KEY, review_id, "approve", expires_at)
        assert signing.verify(KEY, review_id, "approve", expires_at, sig)
        for other in _respellings(sig):
            if other != sig:
                assert not signing.verify(KEY, review_id, "approve", expires_at, other), other


def test_a_signature_with_unused_low_bits_set_is_refused() -> None:
    sig = signing.sign(KEY, "review-1", "approve", 7)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    flipped = sig[:-1] + alphabet[alphabet.index(sig[-1]) ^ 1]
    assert base64.urlsafe_b64decode(flipped + "=") == base64.urlsafe_b64decode(sig + "=")  # same bytes
    assert not signing.verify(KEY, "review-1", "approve", 7, flipped)
