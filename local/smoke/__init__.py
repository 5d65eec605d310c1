"""``make smoke``: the customer's path over the wire, against a deployed stage or ``make local``.

``client`` speaks only HTTP, WebSocket and Cognito's public sign-in to a stage's URLs; ``users``
creates and deletes the smoke's own users; ``target`` finds the URLs (stack outputs, or
``make local``'s config route); ``story`` is the steps (a module per theme) and the cleanup;
``__main__`` the command (``python -m local.smoke --help``). Nothing here imports the embedded
stage: it is a client.
"""
