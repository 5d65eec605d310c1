"""The X-Ray tracer of the functions that call AWS: one Powertools ``Tracer``, patching botocore only.

Every AWS call of the functions goes through botocore, so patching it alone records each call
(DynamoDB, Bedrock, SNS, ...) as a subsegment of the invocation's trace. ``Tracer()`` without
``patch_modules`` patches every library the X-Ray SDK knows that happens to be importable
(sqlite3, requests, httpx, ...), importing each one during every cold start although no function
uses them.

Powertools shares one configuration per process, but each ``Tracer()`` patches the modules it is
given, all of them when none are, so the functions use this one instance rather than create
their own. It is created at import, with the module that uses it: Lambda runs the init phase on a
full vCPU, while an invocation of a 256 MB function gets about a seventh of one, so work every
invocation needs costs least there. A function that makes no AWS call does not import this
module: Lambda's active tracing records its invocation without the SDK.
"""

from __future__ import annotations

from typing import Final

from aws_lambda_powertools import Tracer

#: The libraries whose calls are traced: botocore carries every AWS call of the functions.
PATCHED_MODULES: Final = ("botocore",)

tracer = Tracer(patch_modules=PATCHED_MODULES)
