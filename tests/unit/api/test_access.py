"""lambdas.api.access: one table of who may call which REST route."""

from __future__ import annotations

import pytest

from lambdas.api import access


def test_each_role_gets_only_its_routes() -> None:
    agent = {(r.method, r.path) for r in access.routes_for(access.AGENT)}
    assert ("POST", "/handoffs/{session_id}/accept") in agent
    assert ("DELETE", "/sessions/{id}") not in agent
    assert ("POST", "/admin/agents") not in agent
    assert all(not r.public for r in access.routes_for(access.ADMIN))


def test_the_review_links_are_public_and_nothing_else_is() -> None:
    assert sorted({r.path for r in access.ROUTES if r.public}) == ["/reviews/{id}/approve", "/reviews/{id}/reject"]


def test_a_route_names_its_arn_suffix_with_each_parameter_a_wildcard() -> None:
    assert access.route("POST", "/handoffs/{session_id}/close").arn_suffix() == "POST/handoffs/*/close"


def test_fails_on_a_route_the_table_lacks() -> None:
    with pytest.raises(KeyError):
        access.route("PUT", "/sessions/{id}")
