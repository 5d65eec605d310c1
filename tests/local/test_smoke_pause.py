"""local.smoke.pause: make smoke PAUSE=1 waits for Enter after each step, and a Ctrl-C cancels the wait."""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from local.smoke.pause import ENDED, PROMPT, Pause


def test_each_pause_prompts_and_waits_for_one_line_until_the_input_ends() -> None:
    said: list[str] = []

    async def scenario() -> None:
        pause = Pause(said.append, io.StringIO("\n\n"))
        await pause()
        await pause()
        await pause()  # the input has ended: says so once, and from then on returns at once
        await pause()

    asyncio.run(scenario())
    assert said == [PROMPT, PROMPT, PROMPT, ENDED]


def test_a_pause_waits_for_enter_and_a_cancellation_ends_the_wait() -> None:
    read, write = os.pipe()
    said: list[str] = []

    async def scenario() -> tuple[bool, bool]:
        with os.fdopen(read) as stream:
            pause = Pause(said.append, stream)
            waiting = asyncio.ensure_future(pause())
            await asyncio.sleep(0)
            still_waiting = not waiting.done()  # nothing written yet
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            os.write(write, b"\n")
            await pause()  # the line written later ends the next pause
            os.close(write)
            await pause()  # the end of the input: the reading thread has finished
            return still_waiting, waiting.cancelled()

    assert asyncio.run(scenario()) == (True, True)
    assert said == [PROMPT, PROMPT, PROMPT, ENDED]
