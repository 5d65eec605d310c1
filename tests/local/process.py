"""``python -m local`` in a subprocess on free ports, as a developer starts it, for the tests to drive."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedded.synth import ROOT

_URL = re.compile(r"^\s+(REST API|WebSocket)\s+(\S+)")
_SERVING = re.compile(r"^serving after (\d+(?:\.\d+)?)s")


@dataclass
class LocalProcess:
    """The running server: its URLs (from its banner) and everything it printed so far."""

    process: subprocess.Popen[str]
    rest: str = ""
    websocket: str = ""
    startup_seconds: float = 0.0
    lines: list[str] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return self.rest.rsplit("/", 1)[0]

    @property
    def output(self) -> str:
        return "\n".join(self.lines[-200:])

    def config(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.origin}/local/config", timeout=10) as response:  # noqa: S310 - localhost
            return dict(json.loads(response.read()))

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.origin}/local/status", timeout=30) as response:  # noqa: S310 - localhost
            return dict(json.loads(response.read()))

    def stop(self, timeout: float = 30) -> int:
        """SIGINT, as Ctrl-C sends it; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=timeout)


def assembly() -> Path:
    """The dev stage's cloud assembly, synthesized from the code under test once per test run.

    Never an existing ``cdk.out``: an old ``make synth``'s would stand up code the run does not test.
    """
    from embedded.synth import shared_stage, stage_config

    return shared_stage(stage_config("dev")).assembly_dir


@contextmanager
def local_server(*args: str, timeout: float = 90) -> Iterator[LocalProcess]:
    """Start ``python -m local`` on free ports; yield it once it serves; stop it (SIGINT) afterwards."""
    command = [sys.executable, "-m", "local", "--rest-port", "0", "--ws-port", "0", "--assembly", str(assembly())]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(  # noqa: S603 - our own module
        [*command, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    server = LocalProcess(process)
    serving = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            server.lines.append(line)
            url = _URL.match(line)
            if url is not None:
                if url.group(1) == "REST API":
                    server.rest = url.group(2)
                else:
                    server.websocket = url.group(2).split("?", 1)[0]
            started = _SERVING.match(line)
            if started is not None:
                server.startup_seconds = float(started.group(1))
                serving.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not serving.wait(0.2):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            reader.join(5)
            raise RuntimeError(f"python -m local did not start (exit {process.poll()}):\n{server.output}")
    try:
        yield server
    finally:
        if process.poll() is None:
            try:
                server.stop()
            except subprocess.TimeoutExpired:
                process.kill()
        reader.join(5)
