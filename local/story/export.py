"""The story's exports: one whose low risk score approves it without a reviewer (its automatic approval
in the audit trail), one approved through the reviewer's signed link, one rejected, and the e-mails that
tell the requester of each.

Opening the review link only shows a confirmation page; the reviewer's POST of its signed fields moves
the export on. The notices are read from what the stage's mailer sent (moto's SES keeps every accepted
message).
"""

from __future__ import annotations

import html
import json
import re
import time
import urllib.parse
from typing import Any

from embedded.services.firehose import read_lines
from embedded.services.sns import published
from local.story.base import Step, StoryParts, expect, present

#: The admin's verified address (the dev stage mails only example.com).
REQUESTER_EMAIL = "root@example.com"


class ExportSteps(StoryParts):
    """Exports and the e-mails to their requester (see the module docstring)."""

    def _await_mail(self, step: Step, address: str, count: int) -> Any:
        self.stage.settle(until=lambda: len(self.mail_to(address)) >= count, timeout=30, wait_executions=False)
        received = self.mail_to(address)
        expect(len(received) == count, f"{address} has {len(received)} e-mails, expected {count}")
        step.calls.append(f"ses:SendEmail -> {address}: {received[-1].subject}")
        return received[-1]

    def _reviewer_topic(self) -> Any:
        reviewer_topic = self.stage.function("gate_runtime.request.handler").environment["REVIEWER_TOPIC_ARN"]
        return self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == reviewer_topic)

    def _states_entered(self, execution: str) -> list[str]:
        history = self.stage.client("stepfunctions").get_execution_history(executionArn=execution, maxResults=1000)
        return [e["stateEnteredEventDetails"]["name"] for e in history["events"] if "stateEnteredEventDetails" in e]

    def audit_lines(self, pk: str) -> list[dict[str, Any]]:
        """The audit trail's lines of the item ``pk``, read back from the locked bucket."""
        stream = self.stage.function("lambdas.events.router.handler").environment["AUDIT_STREAM_NAME"]
        destination = self.stage.client("firehose").describe_delivery_stream(DeliveryStreamName=stream)[
            "DeliveryStreamDescription"
        ]["Destinations"][0]["ExtendedS3DestinationDescription"]
        bucket = destination["BucketARN"].split(":::", 1)[1]
        lines = read_lines(self.stage.client("s3"), bucket, destination["Prefix"].split("!{", 1)[0])
        return [line for _, line in lines if line.get("pk") == pk]

    def low_risk_export_needs_no_reviewer(self) -> None:
        """Before any customer has a record, the admin's export scores below dev's threshold: no reviewer."""
        started = time.monotonic()
        step = self.step("An export holding no customer records goes through without a reviewer, audited")
        reviews = len(published(self.stage.cloud, self._reviewer_topic(), []))
        response = self.rest(step, "POST", "/admin/export", "root", body={"reason": "catalogue backup"})
        expect(response.status == 202, f"export request answered {response.status}: {response.body}")
        execution = response.json()["execution_arn"]
        done = self.stage.wait_execution(execution, timeout=40, tick=self.config.export_poll_seconds)
        expect(
            done["status"] == "SUCCEEDED",
            f"export ended {done['status']}: {self.stage.execution_errors(execution)}",
        )
        states = self._states_entered(execution)
        expect("RecordAutomaticApproval" in states, f"no automatic approval: {states}")
        expect(not any("RequestReview" in s for s in states), f"a low-risk export asked a reviewer: {states}")
        expect(len(published(self.stage.cloud, self._reviewer_topic(), [])) == reviews, "the reviewer was asked")
        step.changes.append(f"export {done['status']} without a reviewer ({' -> '.join(states[:5])} ...)")
        # The decision and its reason reach the audit trail through the table's stream.
        self.values["auto_export"] = execution
        pk = f"REVIEW#export-{execution.rsplit(':', 1)[-1]}"
        self.stage.settle(until=lambda: bool(self.audit_lines(pk)), timeout=30, wait_executions=False)
        (line,) = self.audit_lines(pk)
        expect(
            (line["new_status"], line["decided_by"]) == ("approved", "automatic"),
            f"audit line of the automatic approval: {line}",
        )
        expect(line["decision_reason"].startswith("risk score 0: scope 0 (no customer records)"), str(line))
        expect(line["risk_score"] < line["review_threshold"] == self.config.export_review_min_score, str(line))
        step.changes.append(f"audit: {pk} approved by {line['decided_by']}: {line['decision_reason']}")
        self.values["requester_mails"] = 1
        self._await_mail(step, REQUESTER_EMAIL, 1)
        self.done(step, started)

    def export_approved(self) -> None:
        started, step = time.monotonic(), self.step("Export requested, approved through the signed link, finished")
        response = self.rest(step, "POST", "/admin/export", "root", body={"reason": "quarterly analytics"})
        expect(response.status == 202, f"export request answered {response.status}: {response.body}")
        execution = response.json()["execution_arn"]
        reviewer_topic = self.stage.function("gate_runtime.request.handler").environment["REVIEWER_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == reviewer_topic)
        self.stage.settle(until=lambda: bool(published(self.stage.cloud, topic, [])), timeout=20, wait_executions=False)
        mail = published(self.stage.cloud, topic, [])[-1].message
        link = re.search(r"https://\S+/reviews/[^/\s]+/approve\?\S+", mail)
        expect(link is not None, f"no approve link in the reviewer message: {mail[:300]}")
        link = present(link, "link")
        url = urllib.parse.urlsplit(link.group(0))
        path = "/" + url.path.split("/", 2)[2]  # drop the stage
        query = dict(urllib.parse.parse_qsl(url.query))
        # Opening the link (as a mail scanner would) only shows the confirmation page.
        page = self.rest(step, "GET", path, None, query=query)
        expect(page.status == 200, f"approve link answered {page.status}: {page.body[:200]}")
        fields = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', page.body)
        expect('<form method="post"' in page.body and bool(fields), f"no confirmation form: {page.body[:300]}")
        waiting = self.stage.client("stepfunctions").describe_execution(executionArn=execution)["status"]
        expect(waiting == "RUNNING", f"opening the review link alone moved the export to {waiting}")
        expect("RecordAutomaticApproval" not in self._states_entered(execution), "a risky export was auto-approved")
        step.changes.append("GET of the approve link: confirmation page, export still waiting")
        # The reviewer presses the button: the signed fields are POSTed to the same address.
        form = urllib.parse.urlencode([(name, html.unescape(value)) for name, value in fields])
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        page = self.rest(step, "POST", path, None, query=query, headers=headers, body=form)
        expect(page.status == 200, f"approve confirmation answered {page.status}: {page.body[:200]}")
        # The export polls DescribeExport after each Wait: time passes while the stage is idle
        done = self.stage.wait_execution(execution, timeout=40, tick=self.config.export_poll_seconds)
        output = json.loads(done.get("output") or "{}")
        export = output.get("export") if isinstance(output, dict) else None
        detail = {k: v for k, v in (export or {}).items() if k.lower() in ("status", "exportstatus", "s3prefix")}
        step.changes.append(f"export execution {done['status']} {json.dumps(detail) if detail else ''}".rstrip())
        expect(
            done["status"] == "SUCCEEDED",
            f"export ended {done['status']}: {done.get('error')}; history: {self.stage.execution_errors(execution)}",
        )
        self.done(step, started)

    def requester_is_told_where_the_export_is(self) -> None:
        started, step = time.monotonic(), self.step("The export's requester gets one e-mail with its location")
        mailed = int(self.values.get("requester_mails", 0))
        message = self._await_mail(step, REQUESTER_EMAIL, mailed + 1)
        location = re.search(r"s3://\S+", message.body)
        expect(location is not None, f"the e-mail names no location: {message.body[:300]}")
        location = present(location, "location")
        archive = self.stage.only("AWS::S3::Bucket", where=lambda b: b.logical_id.startswith("ArchiveBucket")).ref
        expect(location.group(0).startswith(f"s3://{archive}/exports/"), f"unexpected location {location.group(0)}")
        self.stage.settle(timeout=2, wait_executions=False)
        expect(len(self.mail_to(REQUESTER_EMAIL)) == mailed + 1, "the requester was mailed twice")
        step.changes.append(f"one e-mail to {REQUESTER_EMAIL}: {location.group(0)}")
        self.done(step, started)

    def rejected_export_tells_the_requester(self) -> None:
        started, step = time.monotonic(), self.step("An export the reviewer rejects: the requester is told")
        reviewer_topic = self.stage.function("gate_runtime.request.handler").environment["REVIEWER_TOPIC_ARN"]
        topic = self.stage.only("AWS::SNS::Topic", where=lambda t: t.ref == reviewer_topic)
        reviews = len(published(self.stage.cloud, topic, []))
        response = self.rest(step, "POST", "/admin/export", "root", body={"reason": "ad-hoc extract"})
        expect(response.status == 202, f"export request answered {response.status}: {response.body}")
        execution = response.json()["execution_arn"]
        name = execution.rsplit(":", 1)[-1]
        self.stage.settle(
            until=lambda: len(published(self.stage.cloud, topic, [])) > reviews, timeout=20, wait_executions=False
        )
        review_mail = published(self.stage.cloud, topic, [])[-1].message
        link = re.search(r"https://\S+/reviews/[^/\s]+/reject\?\S+", review_mail)
        expect(link is not None, "no reject link in the reviewer's message")
        link = present(link, "link")
        url = urllib.parse.urlsplit(link.group(0))
        path, query = "/" + url.path.split("/", 2)[2], dict(urllib.parse.parse_qsl(url.query))
        page = self.rest(step, "GET", path, None, query=query)
        fields = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', page.body)
        form = urllib.parse.urlencode([(k, html.unescape(v)) for k, v in fields])
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        page = self.rest(step, "POST", path, None, query=query, headers=headers, body=form)
        expect(page.status == 200, f"reject confirmation answered {page.status}: {page.body[:200]}")
        done = self.stage.wait_execution(execution, timeout=40)
        expect(done["status"] == "FAILED", f"a rejected export ended {done['status']}")
        message = self._await_mail(step, REQUESTER_EMAIL, int(self.values.get("requester_mails", 0)) + 2)
        expect("not approved" in message.subject, f"unexpected subject {message.subject!r}")
        expect(name in message.body, "the rejection does not name the export")
        step.changes.append(f"export {name} rejected; one e-mail to {REQUESTER_EMAIL}")
        self.done(step, started)
