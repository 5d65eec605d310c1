"""Handlers for the ws area."""
