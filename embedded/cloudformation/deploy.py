"""Deploy a stack template onto moto: parameters, conditions, dependency order, loaders, exports."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from embedded.cloudformation.assembly import StackTemplate
from embedded.cloudformation.intrinsics import Deployed, Pseudo, Resolver, Unresolvable
from embedded.cloudformation.loaders import LOADERS, Cloud, is_passive

#: SSM parameters CDK templates read that cannot exist on a fresh moto account.
DEFAULT_SSM_VALUES: dict[str, str] = {"/cdk-bootstrap/hnb659fds/version": "30"}
_SUB_NAMES = re.compile(r"\$\{([^}!][^}]*)\}")


class DeploymentError(RuntimeError):
    """A resource the harness could not stand up; the message names the stack, id and type."""


@dataclass
class DeployedStack:
    """A stack on moto: its template and every resource by logical id."""

    template: StackTemplate
    resources: dict[str, Deployed] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.template.stack_name

    @property
    def part(self) -> str:
        return self.template.part

    def of_type(self, resource_type: str) -> list[Deployed]:
        return [r for r in self.resources.values() if r.type == resource_type]


def references(value: Any) -> Iterator[str]:
    """Logical ids a template value refers to (Ref, GetAtt, Sub variables)."""
    if isinstance(value, list):
        for item in value:
            yield from references(item)
    elif isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" and isinstance(arg, str):
                yield arg
                return
            if key == "Fn::GetAtt":
                yield (arg.split(".")[0] if isinstance(arg, str) else str(arg[0]))
                return
            if key == "Fn::Sub":
                template = arg if isinstance(arg, str) else arg[0]
                local = set() if isinstance(arg, str) else set(arg[1])
                for name in _SUB_NAMES.findall(str(template)):
                    head = name.split(".")[0]
                    if head not in local:
                        yield head
                if not isinstance(arg, str):
                    yield from references(arg[1])
                return
        for item in value.values():
            yield from references(item)


def dependency_order(resources: Mapping[str, dict[str, Any]]) -> list[str]:
    """Logical ids, each after everything it refers to or DependsOn."""
    ordered: list[str] = []
    state: dict[str, int] = {}

    def visit(lid: str, trail: tuple[str, ...]) -> None:
        if state.get(lid) == 2:
            return
        if state.get(lid) == 1:
            raise DeploymentError(f"circular dependency: {' -> '.join((*trail, lid))}")
        state[lid] = 1
        resource = resources[lid]
        depends = resource.get("DependsOn", [])
        deps = [depends] if isinstance(depends, str) else list(depends)
        deps += [r for r in references(resource.get("Properties", {})) if r in resources]
        for dep in sorted(set(deps)):
            visit(dep, (*trail, lid))
        state[lid] = 2
        ordered.append(lid)

    for lid in resources:
        visit(lid, ())
    return ordered


def _parameter_values(cloud: Cloud, stack: StackTemplate, overrides: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, spec in stack.template.get("Parameters", {}).items():
        if name in overrides:
            values[name] = overrides[name]
            continue
        kind = str(spec.get("Type", "String"))
        default = spec.get("Default")
        if kind.startswith("AWS::SSM::Parameter::Value"):
            values[name] = _ssm_value(cloud, str(default))
        elif default is not None:
            values[name] = default
        else:
            raise DeploymentError(f"{stack.stack_name}: parameter {name} has no default and no value was given")
    return values


def _ssm_value(cloud: Cloud, name: str) -> str:
    ssm = cloud.client("ssm")
    try:
        return str(ssm.get_parameter(Name=name)["Parameter"]["Value"])
    except ssm.exceptions.ParameterNotFound:
        pass
    if name in cloud.ssm_fallbacks:
        return cloud.ssm_fallbacks[name]
    if name in DEFAULT_SSM_VALUES:
        return DEFAULT_SSM_VALUES[name]
    if name.startswith("/aws/service/powertools/"):
        # The public Powertools layer: its ARN shape, pinned version from the parameter name.
        version = name.rsplit("/", 1)[-1].replace(".", "_")
        return f"arn:aws:lambda:{cloud.region}:017000801446:layer:AWSLambdaPowertoolsPythonV3-{version}:1"
    raise DeploymentError(f"SSM parameter {name} is read by the template but exists nowhere on moto")


def deploy_stack(
    cloud: Cloud,
    stack: StackTemplate,
    exports: dict[str, Any],
    *,
    parameters: Mapping[str, Any] | None = None,
    stack_outputs: dict[str, dict[str, Any]] | None = None,
) -> DeployedStack:
    """Stand every resource of ``stack`` up on moto, in dependency order; add its exports."""
    deployed = DeployedStack(stack)
    deployed.parameters = _parameter_values(cloud, stack, parameters or {})
    pseudo = Pseudo(region=cloud.region, account=cloud.account, stack_name=stack.stack_name)
    resolver = Resolver(
        pseudo=pseudo,
        resources=deployed.resources,
        parameters=deployed.parameters,
        exports=exports,
        conditions=stack.template.get("Conditions"),
        mappings=stack.template.get("Mappings"),
        stack_outputs=stack_outputs,
    )
    resources = stack.resources
    for lid in dependency_order(resources):
        resource = resources[lid]
        kind = str(resource["Type"])
        if "Condition" in resource and not resolver.condition(str(resource["Condition"])):
            continue
        try:
            props = resolver.resolve(resource.get("Properties", {}))
            if is_passive(kind) or (
                kind == "AWS::SNS::Subscription" and props.get("Protocol") in ("email", "email-json", "sms")
            ):
                cloud.registry.passive.append((stack.stack_name, lid, kind))
                deployed.resources[lid] = Deployed(lid, kind, f"passive-{lid}", {}, props, live=False)
                continue
            if kind not in LOADERS:
                raise DeploymentError(f"no loader for {kind}: add one to embedded/cloudformation/loaders/")
            result = LOADERS[kind](cloud, pseudo, lid, props)
        except (Unresolvable, DeploymentError) as error:
            raise DeploymentError(f"{stack.stack_name}/{lid} ({kind}): {error}") from error
        except Exception as error:  # a moto API error: say which resource it was
            raise DeploymentError(f"{stack.stack_name}/{lid} ({kind}): moto refused it: {str(error)[:800]}") from error
        result.properties = props
        deployed.resources[lid] = result
    for name, output in stack.template.get("Outputs", {}).items():
        if "Condition" in output and not resolver.condition(str(output["Condition"])):
            continue
        value = resolver.resolve(output["Value"])
        deployed.outputs[name] = value
        if "Export" in output:
            exports[str(resolver.resolve(output["Export"]["Name"]))] = value
    if stack_outputs is not None:
        stack_outputs[stack.stack_name] = deployed.outputs
    return deployed
