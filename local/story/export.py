"""The story's export notices: the requester of an approved or a rejected export is told by e-mail.

The export itself runs in ``Story.export_approved``; this mixin reads what the stage's mailer
sent (moto's SES keeps every accepted message) and drives a second export to a rejection.
"""

from __future__ import annotations

import html
import re
import time
import urllib.parse
from typing import Any

from embedded.services.sns import published
from local.story.base import Step, StoryParts, expect, present

#: The admin's verified address (the dev stage mails only example.com).
REQUESTER_EMAIL = "root@example.com"


class ExportNoticeSteps(StoryParts):
    """E-mails to the export's requester (see the module docstring)."""

    def _await_mail(self, step: Step, address: str, count: int) -> Any:
        self.stage.settle(until=lambda: len(self.mail_to(address)) >= count, timeout=30, wait_executions=False)
        received = self.mail_to(address)
        expect(len(received) == count, f"{address} has {len(received)} e-mails, expected {count}")
        step.calls.append(f"ses:SendEmail -> {address}: {received[-1].subject}")
        return received[-1]

    def requester_is_told_where_the_export_is(self) -> None:
        started, step = time.monotonic(), self.step("The export's requester gets one e-mail with its location")
        message = self._await_mail(step, REQUESTER_EMAIL, 1)
        location = re.search(r"s3://\S+", message.body)
        expect(location is not None, f"the e-mail names no location: {message.body[:300]}")
        location = present(location, "location")
        archive = self.stage.only("AWS::S3::Bucket", where=lambda b: b.logical_id.startswith("ArchiveBucket")).ref
        expect(location.group(0).startswith(f"s3://{archive}/exports/"), f"unexpected location {location.group(0)}")
        self.stage.settle(timeout=2, wait_executions=False)
        expect(len(self.mail_to(REQUESTER_EMAIL)) == 1, "the requester was mailed twice")
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
        message = self._await_mail(step, REQUESTER_EMAIL, 2)
        expect("not approved" in message.subject, f"unexpected subject {message.subject!r}")
        expect(name in message.body, "the rejection does not name the export")
        step.changes.append(f"export {name} rejected; one e-mail to {REQUESTER_EMAIL}")
        self.done(step, started)
