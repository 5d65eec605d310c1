"""``make smoke PAUSE=1``: the story waits for Enter after each step, to look at the stage between steps.

A daemon thread reads standard input, so waiting for Enter is an await that Ctrl-C cancels like any
other (the story stops and removes what it created), and a thread still blocked in its read never
keeps the process alive or leaves a shared terminal changed, as ``loop.connect_read_pipe`` would
by making it non-blocking.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Final, TextIO

PROMPT: Final = "        paused  Enter runs the next step; Ctrl-C stops the story and removes what it created"
ENDED: Final = "        (standard input ended: the story runs on without pausing)"


class Pause:
    """Awaited after each step: the prompt, then the next line of ``stream``; nothing once it has ended."""

    def __init__(self, say: Callable[[str], None], stream: TextIO | None = None) -> None:
        self._say = say
        self._loop = asyncio.get_running_loop()
        self._lines: asyncio.Queue[str] = asyncio.Queue()
        self._ended = False
        threading.Thread(target=self._read, args=(stream or sys.stdin,), name="smoke-pause", daemon=True).start()

    def _read(self, stream: TextIO) -> None:
        for line in stream:
            if not self._post(line):
                return
        self._post("")  # the end of the input

    def _post(self, line: str) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._lines.put_nowait, line)
        except RuntimeError:  # the loop has closed: the run is over
            return False
        return True

    async def __call__(self) -> None:
        if self._ended:
            return
        self._say(PROMPT)
        if not await self._lines.get():
            self._ended = True
            self._say(ENDED)
