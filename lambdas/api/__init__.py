"""Handlers for the api area."""
