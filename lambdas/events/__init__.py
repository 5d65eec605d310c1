"""Handlers for the events area."""
