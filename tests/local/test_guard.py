"""local.guard: loopback host names only, JSON from the server's own pages only, no token in the log."""

from __future__ import annotations

import pytest

from local.guard import is_own_origin, is_served_host, redact


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:8300", "localhost:8300", "[::1]:8300", "127.0.0.2:8300", "LOCALHOST", "10.0.0.5:8300"],
)
def test_loopback_names_and_the_bound_address_are_served(host: str) -> None:
    assert is_served_host(host, bound="10.0.0.5")


@pytest.mark.parametrize("host", [None, "", "evil.example", "evil.example:8300", "127.0.0.1.evil.example", "[zz"])
def test_any_other_host_name_is_refused(host: str | None) -> None:
    # a DNS-rebinding page keeps its own name in Host even when it resolves to 127.0.0.1
    assert not is_served_host(host, bound="127.0.0.1")


def test_own_origins_are_the_servers_pages_on_any_loopback_name_and_the_stages_cors_origins() -> None:
    own = ("http://localhost:3000",)
    assert is_own_origin("http://127.0.0.1:8300", "127.0.0.1", 8300, own)
    assert is_own_origin("http://localhost:8300", "127.0.0.1", 8300, own)
    assert is_own_origin("http://localhost:3000", "127.0.0.1", 8300, own)
    for other in ("http://evil.example", "http://127.0.0.1:9999", "https://127.0.0.1:8300", "null", "http://[zz"):
        assert not is_own_origin(other, "127.0.0.1", 8300, own)


def test_credentials_in_a_logged_url_are_redacted() -> None:
    assert redact("/dev?token=eyJ.a.b&session_id=s-1") == "/dev?token=<redacted>&session_id=s-1"
    assert redact("/x?a=1&id_token=abc") == "/x?a=1&id_token=<redacted>"
    assert redact("/x?mytoken=keep") == "/x?mytoken=keep"
