"""Keep what the functions log out of a runner's own output: ``make bench``, ``make demo``, ``make load``.

Those runners invoke the handlers in their own process (the embedded stage, the stream router), and
the handlers log through Powertools' Logger: JSON lines through a ``logging.StreamHandler`` on the
``sys.stdout`` of the moment the Logger was created. Inside :func:`function_logs`, ``sys.stdout``
is a sink and every logging handler that writes to standard output writes to that sink too;
afterwards both are put back. Only the runner's process changes: the app's loggers, levels and
lines are as they are (``bench/cost.py`` counts those lines as CloudWatch Logs ingestion through
a sink's ``on_write``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Callable, Iterator
from typing import TextIO


class Sink(io.StringIO):
    """A text stream that keeps nothing, after passing what is written to ``on_write`` when given."""

    def __init__(self, on_write: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self._on_write = on_write

    def write(self, text: str) -> int:
        if self._on_write is not None:
            self._on_write(text)
        return len(text)


def _stdout_handlers() -> list[logging.StreamHandler[TextIO]]:
    """Logging handlers, on any logger, that write to standard output as it is now."""
    streams = {id(sys.stdout), id(sys.__stdout__)}
    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    return [
        handler
        for logger in loggers
        for handler in logger.handlers
        if isinstance(handler, logging.StreamHandler) and id(handler.stream) in streams
    ]


@contextlib.contextmanager
def function_logs(sink: TextIO | None = None) -> Iterator[TextIO]:
    """Send whatever logs to standard output into ``sink`` (by default: nowhere) for the block."""
    target: TextIO = sink if sink is not None else Sink()
    swapped = [(handler, handler.setStream(target)) for handler in _stdout_handlers()]
    try:
        with contextlib.redirect_stdout(target):
            yield target
    finally:
        for handler, stream in swapped:
            if stream is not None:
                handler.setStream(stream)
