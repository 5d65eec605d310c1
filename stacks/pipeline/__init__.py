"""Delivery: the CDK pipeline from the repository to dev and prod, and the roles it and pull requests use."""

from stacks.pipeline.config import PipelineConfig, load_pipeline_config

__all__ = ["PipelineConfig", "load_pipeline_config"]
