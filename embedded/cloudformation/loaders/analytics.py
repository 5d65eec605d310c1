"""Loaders of the analytics path: Firehose delivery streams, the Glue Data Catalog's databases and tables,
Athena workgroups and named queries.
"""

from __future__ import annotations

from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import Cloud, loader, physical_name


def _tags(props: dict[str, Any]) -> list[dict[str, str]]:
    return [{"Key": str(t["Key"]), "Value": str(t["Value"])} for t in props.get("Tags", [])]


@loader("AWS::KinesisFirehose::DeliveryStream")
def _delivery_stream(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("DeliveryStreamName") or physical_name(pseudo.stack_name, lid, max_length=64))
    destination = props.get("ExtendedS3DestinationConfiguration") or props.get("S3DestinationConfiguration")
    if destination is None or props.get("DeliveryStreamType", "DirectPut") != "DirectPut":
        raise NotImplementedError("only DirectPut delivery streams to S3 are emulated")
    s3 = {
        k: destination[k]
        for k in ("RoleARN", "BucketARN", "Prefix", "ErrorOutputPrefix", "BufferingHints", "CompressionFormat")
        if k in destination
    }
    # moto delivers each put to S3 at once (no buffering): what lands is what the consumer reads.
    arn = cloud.client("firehose").create_delivery_stream(
        DeliveryStreamName=name, DeliveryStreamType="DirectPut", ExtendedS3DestinationConfiguration=s3
    )["DeliveryStreamARN"]
    return Deployed(lid, "AWS::KinesisFirehose::DeliveryStream", name, {"Arn": arn})


# ---------------------------------------------------------------------- Glue Data Catalog, Athena


@loader("AWS::Glue::Database")
def _glue_database(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    database_input = dict(props.get("DatabaseInput") or {})
    name = str(database_input.get("Name") or physical_name(pseudo.stack_name, lid, max_length=255, lower=True))
    cloud.client("glue").create_database(DatabaseInput={**database_input, "Name": name})
    return Deployed(lid, "AWS::Glue::Database", name, {})


@loader("AWS::Glue::Table")
def _glue_table(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    """The table as the template describes it; readers find its columns and projection in the catalog."""
    table_input = dict(props["TableInput"])
    name = str(table_input.get("Name") or physical_name(pseudo.stack_name, lid, max_length=255, lower=True))
    cloud.client("glue").create_table(DatabaseName=str(props["DatabaseName"]), TableInput={**table_input, "Name": name})
    return Deployed(lid, "AWS::Glue::Table", name, {})


@loader("AWS::Athena::WorkGroup")
def _athena_workgroup(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props["Name"])
    args: dict[str, Any] = {"Name": name, "Configuration": props.get("WorkGroupConfiguration") or {}}
    if "Description" in props:
        args["Description"] = str(props["Description"])
    if props.get("Tags"):
        args["Tags"] = _tags(props)
    cloud.client("athena").create_work_group(**args)
    return Deployed(lid, "AWS::Athena::WorkGroup", name, {"CreationTime": "0"})


@loader("AWS::Athena::NamedQuery")
def _athena_named_query(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    args: dict[str, Any] = {
        "Name": str(props.get("Name") or lid),
        "Database": str(props["Database"]),
        "QueryString": str(props["QueryString"]),
        "WorkGroup": str(props.get("WorkGroup", "primary")),
    }
    if "Description" in props:
        args["Description"] = str(props["Description"])
    query_id = cloud.client("athena").create_named_query(**args)["NamedQueryId"]
    return Deployed(lid, "AWS::Athena::NamedQuery", query_id, {"NamedQueryId": query_id})
