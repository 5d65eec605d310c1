"""embedded.function_logs: the functions' log lines go to the runner's sink, and come back to stdout after."""

from __future__ import annotations

import logging
import sys

import pytest

from embedded.function_logs import Sink, function_logs


def test_function_logs_send_stdout_handlers_to_the_sink_and_put_them_back(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a logger that writes to standard output, as Powertools' Logger does
    logger = logging.getLogger("function-logs-test")
    handler = logging.StreamHandler(sys.stdout)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    seen: list[str] = []
    try:
        # When it logs inside function_logs, and a print happens there too
        with function_logs(Sink(seen.append)):
            logger.info("inside")
            print("printed inside")
        logger.info("after")
    finally:
        logger.removeHandler(handler)

    # Then the sink saw both, the terminal only what came after
    assert "".join(seen) == "inside\nprinted inside\n"
    assert capsys.readouterr().out == "after\n"
