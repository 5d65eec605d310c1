"""Loaders of Step Functions state machines, and the definition as the template gives it."""

from __future__ import annotations

import json
from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import Cloud, loader, physical_name


def state_machine_definition(props: dict[str, Any]) -> str:
    """The ASL of a state machine: DefinitionString/Definition with DefinitionSubstitutions applied."""
    if "DefinitionString" in props:
        definition = str(props["DefinitionString"])
    elif "Definition" in props:
        definition = json.dumps(props["Definition"])
    else:
        raise ValueError("AWS::StepFunctions::StateMachine without Definition/DefinitionString")
    for key, value in (props.get("DefinitionSubstitutions") or {}).items():
        definition = definition.replace("${" + key + "}", str(value))
    json.loads(definition)  # fail here, with the template at hand, on a definition that is not JSON
    return definition


@loader("AWS::StepFunctions::StateMachine")
def _state_machine(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("StateMachineName") or physical_name(pseudo.stack_name, lid, max_length=80))
    definition = state_machine_definition(props)
    arn = cloud.client("stepfunctions").create_state_machine(
        name=name,
        definition=definition,
        roleArn=str(props["RoleArn"]),
        type=str(props.get("StateMachineType", "STANDARD")),
    )["stateMachineArn"]
    return Deployed(lid, "AWS::StepFunctions::StateMachine", arn, {"Arn": arn, "Name": name})
