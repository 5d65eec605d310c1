"""Loaders of Lambda functions (created on moto, run in this process), the event source mappings and async
invoke configs the harness keeps for its pumps, versions and aliases.
"""

from __future__ import annotations

import uuid
from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import AsyncConfig, Cloud, EventSourceMapping, loader, physical_name


def _placeholder_zip() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("placeholder.py", "# the harness runs handlers in-process\n")
    return buffer.getvalue()


@loader("AWS::Lambda::Function")
def _lambda_function(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("FunctionName") or physical_name(pseudo.stack_name, lid, max_length=64))
    environment = {str(k): str(v) for k, v in (props.get("Environment") or {}).get("Variables", {}).items()}
    # Layers are not created on moto (moto validates them and has no public layers); the
    # handler runs in this process, where every dependency is installed.
    args: dict[str, Any] = {
        "FunctionName": name,
        "Runtime": str(props.get("Runtime", "python3.11")),
        "Role": str(props["Role"]),
        "Handler": str(props.get("Handler", "index.handler")),
        "Code": {"ZipFile": _placeholder_zip()},
        "Timeout": int(props.get("Timeout", 3)),
        "MemorySize": int(props.get("MemorySize", 128)),
        "Environment": {"Variables": environment},
    }
    if "Architectures" in props:
        args["Architectures"] = props["Architectures"]
    if "Description" in props:
        args["Description"] = str(props["Description"])[:256]
    arn = cloud.client("lambda").create_function(**args)["FunctionArn"]
    if props.get("ReservedConcurrentExecutions") is not None:
        reserved = int(props["ReservedConcurrentExecutions"])
        cloud.client("lambda").put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=reserved)
    return Deployed(lid, "AWS::Lambda::Function", name, {"Arn": arn})


@loader("AWS::Lambda::EventSourceMapping")
def _event_source_mapping(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    # Kept by the harness, not created on moto: moto would invoke the function synchronously,
    # one write at a time, ignoring batch size, partial failures, bisect and the DLQ.
    destination = (props.get("DestinationConfig") or {}).get("OnFailure", {}).get("Destination")
    function = str(props["FunctionName"])
    mapping = EventSourceMapping(
        logical_id=lid,
        function_name=function.rsplit(":", 1)[-1] if function.startswith("arn:") else function,
        event_source_arn=str(props["EventSourceArn"]),
        batch_size=int(props.get("BatchSize", 100 if ":dynamodb:" in str(props["EventSourceArn"]) else 10)),
        batching_window_seconds=int(props.get("MaximumBatchingWindowInSeconds", 0)),
        starting_position=props.get("StartingPosition"),
        report_batch_item_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
        bisect_on_error=bool(props.get("BisectBatchOnFunctionError", False)),
        maximum_retry_attempts=(
            int(props["MaximumRetryAttempts"]) if props.get("MaximumRetryAttempts") is not None else None
        ),
        maximum_record_age_seconds=(
            int(props["MaximumRecordAgeInSeconds"]) if props.get("MaximumRecordAgeInSeconds") is not None else None
        ),
        on_failure_arn=str(destination) if destination else None,
        filters=tuple(str(f["Pattern"]) for f in (props.get("FilterCriteria") or {}).get("Filters", [])),
        enabled=bool(props.get("Enabled", True)),
        properties=props,
    )
    cloud.registry.mappings.append(mapping)
    return Deployed(lid, "AWS::Lambda::EventSourceMapping", str(uuid.uuid4()), {"Id": lid})


@loader("AWS::Lambda::EventInvokeConfig")
def _event_invoke_config(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    destinations = props.get("DestinationConfig") or {}
    config = AsyncConfig(
        function_name=str(props["FunctionName"]),
        on_failure_arn=(destinations.get("OnFailure") or {}).get("Destination"),
        on_success_arn=(destinations.get("OnSuccess") or {}).get("Destination"),
        maximum_retry_attempts=props.get("MaximumRetryAttempts"),
    )
    cloud.registry.async_configs[config.function_name] = config
    return Deployed(lid, "AWS::Lambda::EventInvokeConfig", lid)


@loader("AWS::Lambda::Version")
def _lambda_version(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    function = str(props["FunctionName"])
    arn = cloud.arn("lambda", f"function:{function}:1")
    return Deployed(lid, "AWS::Lambda::Version", arn, {"Version": "1", "FunctionArn": arn})


@loader("AWS::Lambda::Alias")
def _lambda_alias(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    arn = cloud.arn("lambda", f"function:{props['FunctionName']}:{props['Name']}")
    return Deployed(lid, "AWS::Lambda::Alias", arn, {"AliasArn": arn})
