"""Delivery: the CDK pipeline from the repository to dev and prod, and the roles it and pull requests use."""

from stacks.pipeline.config import PipelineConfig, load_pipeline_config
from stacks.pipeline.stage import DELIVERY_STAGE, DeliveryStage

__all__ = ["DELIVERY_STAGE", "DeliveryStage", "PipelineConfig", "load_pipeline_config"]
