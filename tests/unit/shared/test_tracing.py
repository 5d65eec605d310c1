"""lambdas.shared.tracing: one tracer, patching botocore alone (every AWS call goes through it)."""

from __future__ import annotations

from lambdas.shared import tracing


def test_the_tracer_patches_botocore_and_nothing_else() -> None:
    assert tracing.PATCHED_MODULES == ("botocore",)
    assert tracing.tracer is not None
