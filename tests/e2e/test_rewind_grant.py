"""Rewinding over REST without the session function's Bedrock grant: the model refuses, nothing breaks.

Its own module: it deploys a stage of its own, which must not share moto's account with the
rewind module's stage (both would create the same table).
"""

from __future__ import annotations

from embedded import embedded_stage
from embedded.cloudformation.assembly import load_assembly
from embedded.synth import StageAssembly
from local.story.chat import open_chat
from tests.e2e.test_rewind import contents, rest_rewind
from tests.e2e.test_strict_stage import _drop_actions, _role_of


def test_without_the_session_functions_bedrock_grant_a_rest_rewind_gets_no_answer(
    synthesized: StageAssembly,
) -> None:
    # Given the stage without the session function's right to call the model
    templates = load_assembly(synthesized.assembly_dir)
    role = _role_of(templates, "lambdas.api.rest.handler")
    _drop_actions(templates, role, {"bedrock:InvokeModelWithResponseStream"})
    with embedded_stage(templates) as stage, stage.clock.frozen():
        chat = open_chat(stage, "ungranted-uma")
        chat.say("Is Frieren volume 3 out?")
        refused_before = len(stage.refusals)
        # When the customer asks over REST for another answer
        response = rest_rewind(chat, {"turn_number": 2})
        # Then the model refuses the call, and the turn stays unanswered
        assert response.status == 200, response.body
        assert response.json()["reply"] is None
        refused = [str(r) for r in stage.refusals[refused_before:]]
        assert any("bedrock:InvokeModelWithResponseStream" in r for r in refused), refused
        assert [t[0] for t in contents(stage, chat)] == [1, 2]
