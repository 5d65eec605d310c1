"""Settings every test shares: no real AWS credentials, a fixed region, quiet jsii."""

from __future__ import annotations

import os

# Set before boto3/moto/jsii are imported by any test module.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
for _key, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_METRICS_NAMESPACE": "MangaAssistTest",
    "POWERTOOLS_SERVICE_NAME": "test",
}.items():
    os.environ[_key] = _value
os.environ.pop("AWS_PROFILE", None)
