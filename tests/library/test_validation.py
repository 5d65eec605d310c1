"""PropErrors: prop errors reach CDK's validation, each with the construct's path; tokens pass."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack, Token
from constructs import Construct

from constructs_lib.validation import PropErrors


class _Thing(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, size: float, existing: object = None,
                 props: object = None) -> None:  # fmt: skip
        super().__init__(scope, construct_id)
        self.errors = PropErrors(self)
        self.errors.check_range("size", size, 1, 40)
        self.errors.check_exclusive(existing=existing, props=props)


def test_valid_props_and_unresolved_tokens_synthesize() -> None:
    app = App()
    stack = Stack(app, "Stack")
    thing = _Thing(stack, "Tokens", size=Token.as_number("deploy-time"))
    _Thing(stack, "Plain", size=40, existing=object())

    app.synth()

    assert thing.errors.messages == []


def test_fails_with_every_message_prefixed_by_the_construct_path() -> None:
    app = App()
    _Thing(Stack(app, "Stack"), "Bad", size=0, existing=object(), props=object())

    with pytest.raises(RuntimeError) as raised:
        app.synth()

    message = str(raised.value)
    assert "[Stack/Bad] size must be 1..40 (given 0)" in message
    assert "[Stack/Bad] give existing or props, not both (given existing, props)" in message
