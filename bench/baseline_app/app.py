"""BASELINE for the synth benchmark: a one-bucket CDK app on the same pinned versions (the jsii floor)."""

from aws_cdk import App, Stack
from aws_cdk import aws_s3 as s3

app = App()
s3.Bucket(Stack(app, "OneBucket"), "Bucket")
app.synth()
