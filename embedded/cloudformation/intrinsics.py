"""CloudFormation intrinsic functions and pseudo parameters, resolved against resources on moto.

A ``Resolver`` turns a template value into what CloudFormation would have passed to the service:
``Ref`` / ``Fn::GetAtt`` read the physical ids and attributes of resources already stood up,
``Fn::ImportValue`` reads the exports of stacks deployed before, pseudo parameters come from the
embedded account. Anything it cannot resolve raises ``Unresolvable`` naming the value, so a
template the harness does not understand fails loudly instead of deploying garbage.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Unresolvable(ValueError):
    """A template value the harness cannot resolve; the message says which and where."""


@dataclass
class Deployed:
    """A resource stood up (or deliberately not stood up) by the harness."""

    logical_id: str
    type: str
    ref: str
    attributes: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    #: False for resources that have no behaviour to emulate (policies, alarms, metadata)
    live: bool = True

    def attribute(self, name: str) -> Any:
        if name in self.attributes:
            return self.attributes[name]
        if not self.live:
            return f"passive:{self.type}:{self.logical_id}:{name}"
        raise Unresolvable(f"Fn::GetAtt {self.logical_id}.{name}: {self.type} exposes {sorted(self.attributes)}")


@dataclass(frozen=True)
class Pseudo:
    """The embedded account's pseudo parameters."""

    region: str
    account: str
    stack_name: str
    partition: str = "aws"
    url_suffix: str = "amazonaws.com"

    def value(self, name: str) -> Any:
        values: dict[str, Any] = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": self.url_suffix,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": (
                f"arn:{self.partition}:cloudformation:{self.region}:{self.account}:stack/{self.stack_name}/0"
            ),
            "AWS::NotificationARNs": [],
        }
        if name not in values:
            raise Unresolvable(f"unknown pseudo parameter {name}")
        return values[name]


class _NoValue:
    """``AWS::NoValue``: the property is removed."""


NO_VALUE = _NoValue()
_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


class Resolver:
    """Resolves one stack's template values (see module docstring)."""

    def __init__(
        self,
        *,
        pseudo: Pseudo,
        resources: Mapping[str, Deployed],
        parameters: Mapping[str, Any],
        exports: Mapping[str, Any],
        conditions: Mapping[str, Any] | None = None,
        mappings: Mapping[str, Any] | None = None,
        azs: Callable[[str], list[str]] | None = None,
        stack_outputs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.pseudo = pseudo
        self.resources = resources
        self.parameters = parameters
        self.exports = exports
        self._conditions = dict(conditions or {})
        self._condition_values: dict[str, bool] = {}
        self.mappings = mappings or {}
        self._azs = azs or (lambda region: [f"{region}{s}" for s in "abc"])
        self.stack_outputs = stack_outputs or {}

    # ------------------------------------------------------------------ entry point

    def resolve(self, value: Any) -> Any:
        """The value with every intrinsic resolved; ``AWS::NoValue`` entries removed."""
        if isinstance(value, list):
            items = [self.resolve(v) for v in value]
            return [v for v in items if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(str(arg))
            if key.startswith("Fn::") or key == "Condition":
                return self._function(key, arg)
        result = {}
        for key, item in value.items():
            resolved = self.resolve(item)
            if resolved is not NO_VALUE:
                result[key] = resolved
        return result

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name.startswith("AWS::"):
            return self.pseudo.value(name)
        if name in self.parameters:
            return self.parameters[name]
        if name in self.resources:
            return self.resources[name].ref
        raise Unresolvable(f"Ref {name}: no such parameter or resource (not deployed yet?)")

    def get_att(self, logical_id: str, attribute: str) -> Any:
        if logical_id not in self.resources:
            raise Unresolvable(f"Fn::GetAtt {logical_id}.{attribute}: no such resource (not deployed yet?)")
        return self.resources[logical_id].attribute(attribute)

    def condition(self, name: str) -> bool:
        if name not in self._condition_values:
            if name not in self._conditions:
                raise Unresolvable(f"unknown condition {name}")
            self._condition_values[name] = bool(self.resolve(self._conditions[name]))
        return self._condition_values[name]

    # ------------------------------------------------------------------ functions

    def _function(self, key: str, arg: Any) -> Any:
        handler = getattr(self, "_fn_" + key.removeprefix("Fn::").lower(), None)
        if handler is None:
            raise Unresolvable(f"unsupported intrinsic {key}: {json.dumps(arg)[:200]}")
        return handler(arg)

    def _fn_condition(self, arg: Any) -> Any:
        return self.condition(str(arg))

    def _fn_getatt(self, arg: Any) -> Any:
        if isinstance(arg, str):
            logical_id, _, attribute = arg.partition(".")
        else:
            logical_id, attribute = str(arg[0]), str(self.resolve(arg[1]))
        return self.get_att(logical_id, attribute)

    def _fn_join(self, arg: Any) -> str:
        delimiter, items = arg
        values = self.resolve(items)
        return str(delimiter).join(_text(v, "Fn::Join") for v in values)

    def _fn_select(self, arg: Any) -> Any:
        index, items = int(self.resolve(arg[0])), self.resolve(arg[1])
        if not isinstance(items, list) or not 0 <= index < len(items):
            raise Unresolvable(f"Fn::Select index {index} out of {items!r}")
        return items[index]

    def _fn_split(self, arg: Any) -> list[str]:
        delimiter, source = arg
        return _text(self.resolve(source), "Fn::Split").split(str(delimiter))

    def _fn_sub(self, arg: Any) -> str:
        if isinstance(arg, str):
            template, variables = arg, {}
        else:
            template, variables = str(arg[0]), self.resolve(arg[1])

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return _text(variables[name], "Fn::Sub")
            if "." in name and not name.startswith("AWS::"):
                logical_id, _, attribute = name.partition(".")
                return _text(self.get_att(logical_id, attribute), "Fn::Sub")
            return _text(self.ref(name), "Fn::Sub")

        return _SUB_VARIABLE.sub(replace, template)

    def _fn_importvalue(self, arg: Any) -> Any:
        name = _text(self.resolve(arg), "Fn::ImportValue")
        if name not in self.exports:
            raise Unresolvable(f"Fn::ImportValue {name}: no stack deployed before exports it")
        return self.exports[name]

    def _fn_getstackoutput(self, arg: Any) -> Any:
        """CDK's cross-stack reference (``Fn::GetStackOutput``): an output of a stack deployed before."""
        spec = self.resolve(arg)
        stack, name = str(spec["StackName"]), str(spec["OutputName"])
        if stack not in self.stack_outputs or name not in self.stack_outputs[stack]:
            raise Unresolvable(f"Fn::GetStackOutput {stack}.{name}: no such output of a stack deployed before")
        return self.stack_outputs[stack][name]

    def _fn_if(self, arg: Any) -> Any:
        name, when_true, when_false = arg
        return self.resolve(when_true if self.condition(str(name)) else when_false)

    def _fn_equals(self, arg: Any) -> bool:
        left, right = self.resolve(arg[0]), self.resolve(arg[1])
        return bool(left == right)

    def _fn_not(self, arg: Any) -> bool:
        return not self.resolve(arg[0])

    def _fn_and(self, arg: Any) -> bool:
        return all(self.resolve(a) for a in arg)

    def _fn_or(self, arg: Any) -> bool:
        return any(self.resolve(a) for a in arg)

    def _fn_contains(self, arg: Any) -> bool:
        return self.resolve(arg[1]) in self.resolve(arg[0])

    def _fn_base64(self, arg: Any) -> str:
        return base64.b64encode(_text(self.resolve(arg), "Fn::Base64").encode()).decode()

    def _fn_getazs(self, arg: Any) -> list[str]:
        region = self.resolve(arg) or self.pseudo.region
        return self._azs(str(region))

    def _fn_findinmap(self, arg: Any) -> Any:
        name, first, second = (self.resolve(a) for a in arg)
        try:
            return self.mappings[name][first][second]
        except KeyError:
            raise Unresolvable(f"Fn::FindInMap {name}/{first}/{second}: not in Mappings") from None

    def _fn_tojsonstring(self, arg: Any) -> str:
        return json.dumps(self.resolve(arg), separators=(",", ":"))


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise Unresolvable(f"{where}: expected a string, got {value!r}")
