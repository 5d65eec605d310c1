"""Developer tools (python -m tools.<name>)."""
