"""The stream router without its right to read the pseudonym key: AWS refuses it and the change is not lost.

Its own module: it deploys a stage of its own, which must not share moto's account with another
module's stage (both would create the same table).
"""

from __future__ import annotations

import json

from embedded import embedded_stage
from embedded.cloudformation.assembly import load_assembly
from embedded.synth import StageAssembly
from local.story.chat import open_chat
from tests.e2e.test_strict_stage import _drop_actions, _role_of

ROUTER = "lambdas.events.router.handler"


def test_without_the_routers_secret_grant_reading_the_pseudonym_key_is_refused(
    synthesized: StageAssembly,
) -> None:
    # Given the stage without the router's right to read the pseudonym secret
    templates = load_assembly(synthesized.assembly_dir)
    _drop_actions(templates, _role_of(templates, ROUTER), {"secretsmanager:GetSecretValue"})
    with embedded_stage(templates) as stage, stage.clock.frozen():
        # When a customer's session is created (a table change the router must carry on)
        open_chat(stage, "ungranted-una", settle=False)
        stage.settle(timeout=20, wait_executions=False)
        # Then Secrets Manager refuses the router, naming the action and the secret
        refused = [str(r) for r in stage.refusals]
        assert any("secretsmanager:GetSecretValue" in r and "Pseudonyms" in r for r in refused), refused
        # And the router's batch failed (to be retried), rather than writing a line without the pseudonym
        failed = [c for c in stage.calls.by_handler(ROUTER) if c.error is not None]
        assert failed, json.dumps([c.result for c in stage.calls.by_handler(ROUTER)], default=str)[:500]
