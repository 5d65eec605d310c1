"""Loaders of SQS queues, SNS topics and subscriptions, SES configuration sets and identities, and EventBridge
buses, rules (their targets kept for the harness's delivery) and archives.
"""

from __future__ import annotations

from typing import Any

from embedded.cloudformation.intrinsics import Deployed, Pseudo
from embedded.cloudformation.loaders.base import Cloud, RuleTarget, json_text, loader, physical_name


@loader("AWS::SQS::Queue")
def _sqs_queue(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    fifo = bool(props.get("FifoQueue"))
    name = str(
        props.get("QueueName") or physical_name(pseudo.stack_name, lid, max_length=80, suffix=".fifo" if fifo else "")
    )
    attributes: dict[str, str] = {}
    for key in (
        "DelaySeconds",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
        "ReceiveMessageWaitTimeSeconds",
        "VisibilityTimeout",
        "KmsMasterKeyId",
        "KmsDataKeyReusePeriodSeconds",
        "SqsManagedSseEnabled",
        "DeduplicationScope",
        "FifoThroughputLimit",
    ):
        if key in props:
            attributes[key] = str(props[key]).lower() if isinstance(props[key], bool) else str(props[key])
    if fifo:
        attributes["FifoQueue"] = "true"
        if props.get("ContentBasedDeduplication"):
            attributes["ContentBasedDeduplication"] = "true"
    for key in ("RedrivePolicy", "RedriveAllowPolicy"):
        if key in props:
            attributes[key] = json_text(props[key])
    sqs = cloud.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return Deployed(lid, "AWS::SQS::Queue", url, {"Arn": arn, "QueueName": name, "QueueUrl": url})


@loader("AWS::SNS::Topic")
def _sns_topic(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    fifo = bool(props.get("FifoTopic"))
    name = str(
        props.get("TopicName") or physical_name(pseudo.stack_name, lid, max_length=256, suffix=".fifo" if fifo else "")
    )
    attributes: dict[str, str] = {}
    if "KmsMasterKeyId" in props:
        attributes["KmsMasterKeyId"] = str(props["KmsMasterKeyId"])
    if fifo:
        attributes["FifoTopic"] = "true"
        if props.get("ContentBasedDeduplication"):
            attributes["ContentBasedDeduplication"] = "true"
    sns = cloud.client("sns")
    arn = sns.create_topic(Name=name, Attributes=attributes)["TopicArn"]
    for subscription in props.get("Subscription", []):
        sns.subscribe(TopicArn=arn, Protocol=subscription["Protocol"], Endpoint=subscription["Endpoint"])
    return Deployed(lid, "AWS::SNS::Topic", arn, {"TopicArn": arn, "TopicName": name})


@loader("AWS::SNS::Subscription")
def _sns_subscription(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    attributes: dict[str, str] = {}
    if "FilterPolicy" in props:
        attributes["FilterPolicy"] = json_text(props["FilterPolicy"])
    if "FilterPolicyScope" in props:
        attributes["FilterPolicyScope"] = str(props["FilterPolicyScope"])
    if props.get("RawMessageDelivery"):
        attributes["RawMessageDelivery"] = "true"
    if "RedrivePolicy" in props:
        attributes["RedrivePolicy"] = json_text(props["RedrivePolicy"])
    arn = cloud.client("sns").subscribe(
        TopicArn=props["TopicArn"],
        Protocol=props["Protocol"],
        Endpoint=props["Endpoint"],
        Attributes=attributes,
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    return Deployed(lid, "AWS::SNS::Subscription", arn, {"Arn": arn})


@loader("AWS::SES::ConfigurationSet")
def _ses_configuration_set(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=64))
    cloud.client("sesv2").create_configuration_set(ConfigurationSetName=name)
    return Deployed(lid, "AWS::SES::ConfigurationSet", name, {})


@loader("AWS::SES::EmailIdentity")
def _ses_email_identity(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    """The sender, verified at once: on AWS its owner confirms SES's verification mail first."""
    identity = str(props["EmailIdentity"])
    args: dict[str, Any] = {"EmailIdentity": identity}
    if "ConfigurationSetAttributes" in props:
        args["ConfigurationSetName"] = str(props["ConfigurationSetAttributes"]["ConfigurationSetName"])
    cloud.client("sesv2").create_email_identity(**args)
    cloud.client("ses").verify_email_identity(EmailAddress=identity)
    return Deployed(lid, "AWS::SES::EmailIdentity", identity, {})


@loader("AWS::Events::EventBus")
def _event_bus(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props["Name"])
    arn = cloud.client("events").create_event_bus(Name=name)["EventBusArn"]
    return Deployed(lid, "AWS::Events::EventBus", name, {"Arn": arn, "Name": name})


@loader("AWS::Events::Rule")
def _event_rule(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    events = cloud.client("events")
    name = str(props.get("Name") or physical_name(pseudo.stack_name, lid, max_length=64))
    bus = str(props.get("EventBusName", "default"))
    bus_name = bus.rsplit("/", 1)[-1] if bus.startswith("arn:") else bus
    args: dict[str, Any] = {"Name": name, "EventBusName": bus_name, "State": str(props.get("State", "ENABLED"))}
    if "EventPattern" in props:
        args["EventPattern"] = json_text(props["EventPattern"])
    if "ScheduleExpression" in props:
        args["ScheduleExpression"] = str(props["ScheduleExpression"])
    arn = events.put_rule(**args)["RuleArn"]
    for target in props.get("Targets", []):
        cloud.registry.rule_targets.append(RuleTarget(name, bus_name, dict(target)))
    targets = [
        {
            k: (json_text(v) if k == "Input" else v)
            for k, v in t.items()
            if k
            in (
                "Id",
                "Arn",
                "RoleArn",
                "Input",
                "InputPath",
                "InputTransformer",
                "SqsParameters",
                "DeadLetterConfig",
                "RetryPolicy",
            )
        }
        for t in props.get("Targets", [])
    ]
    if targets:
        events.put_targets(Rule=name, EventBusName=bus_name, Targets=targets)
    return Deployed(lid, "AWS::Events::Rule", arn, {"Arn": arn})


@loader("AWS::Events::Archive")
def _event_archive(cloud: Cloud, pseudo: Pseudo, lid: str, props: dict[str, Any]) -> Deployed:
    name = str(props.get("ArchiveName") or physical_name(pseudo.stack_name, lid, max_length=48))
    args: dict[str, Any] = {"ArchiveName": name, "EventSourceArn": str(props["SourceArn"])}
    if "EventPattern" in props:
        args["EventPattern"] = json_text(props["EventPattern"])
    if "RetentionDays" in props:
        args["RetentionDays"] = int(props["RetentionDays"])
    arn = cloud.client("events").create_archive(**args)["ArchiveArn"]
    return Deployed(lid, "AWS::Events::Archive", name, {"Arn": arn, "ArchiveName": name})
