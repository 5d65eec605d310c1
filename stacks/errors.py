"""The error of a stage configuration, shared by stacks/config.py and the blocks it reads."""

from __future__ import annotations


class ConfigError(ValueError):
    """A stage configuration that cannot be deployed; the message says what to fix."""
