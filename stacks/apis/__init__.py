"""The app's APIs, built into the API stack: the REST API, the WebSocket chat API, the dashboard."""
