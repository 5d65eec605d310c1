"""Handlers for the orchestration area."""
