"""``make local``: the synthesized dev stage on embedded AWS (moto), served on localhost.

The stage is the one ``make demo`` and the end-to-end tests stand up (``embedded``):
every stack of the cloud assembly deployed on moto, the Lambda handlers run in this process, the
REST and WebSocket APIs emulated from the templates. This package puts real sockets in front of
it: an HTTP server for the REST API (``server.py``), a WebSocket server for the chat API, a pump
that keeps the stream, queues and schedules moving (``stage.py``), a local stand-in for Bedrock
that says it is one (``responder.py``), and two pages to click through (``pages/``).

Run it with ``make local`` (or ``python -m local --help``); docs/local.md says what differs from AWS.
"""
