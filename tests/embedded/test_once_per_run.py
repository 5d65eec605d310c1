"""What one process of a test run makes, the others reuse: made once per name, whoever asks first."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from embedded.once_per_run import SHARED_DIR, made_once

ROOT = Path(__file__).resolve().parents[2]


def _maker(made: list[Path], content: str = "made") -> Callable[[Path], None]:
    def make(directory: Path) -> None:
        made.append(directory)
        (directory / "content.txt").write_text(content)

    return make


def test_in_a_run_a_name_is_made_once_and_every_caller_gets_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SHARED_DIR, str(tmp_path))
    made: list[Path] = []

    first = made_once("stage dev", _maker(made))
    again = made_once("stage dev", _maker(made, "not again"))
    other = made_once("stage prod", _maker(made, "prod"))

    assert first == again != other
    assert made == [first, other]
    assert (again / "content.txt").read_text() == "made"
    assert first.parent == tmp_path


def test_outside_a_run_every_call_makes_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARED_DIR, raising=False)
    # Made in this test's directory, not the machine's temporary folder, where they would stay
    # until the worker's exit handlers ran, and for good if it were killed.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made: list[Path] = []

    first, second = (made_once("stage dev", _maker(made)) for _ in range(2))

    assert made == [first, second]
    assert first != second
    assert first.parent == second.parent == tmp_path


def test_outside_a_run_what_a_process_made_is_gone_when_it_exits(tmp_path: Path) -> None:
    # A synthesis is megabytes; made for one process, it must not stay in the temporary folder.
    env = {k: v for k, v in os.environ.items() if k != SHARED_DIR} | {"TMPDIR": str(tmp_path)}
    script = (
        "from embedded.once_per_run import made_once\n"
        "d = made_once('stage dev', lambda d: (d / 'template.json').write_text('{}'))\n"
        "print(d, (d / 'template.json').exists())\n"
    )

    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert done.returncode == 0, done.stderr
    made, existed = done.stdout.split()
    assert (Path(made).parent, existed) == (tmp_path, "True")
    assert list(tmp_path.iterdir()) == []


def test_a_caller_that_asks_while_another_makes_it_waits_and_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given one caller making the directory, held in the middle of its make
    monkeypatch.setenv(SHARED_DIR, str(tmp_path))
    started, release = threading.Event(), threading.Event()
    made: list[Path] = []
    results: dict[str, Path] = {}

    def slow(directory: Path) -> None:
        made.append(directory)
        started.set()
        assert release.wait(timeout=30)

    def ask(who: str, make: Callable[[Path], None]) -> None:
        results[who] = made_once("stage dev", make)

    maker = threading.Thread(target=ask, args=("maker", slow))
    maker.start()
    assert started.wait(timeout=30)

    # When a second caller asks meanwhile, and the first then finishes
    waiter = threading.Thread(target=ask, args=("waiter", _maker(made)))
    waiter.start()
    waiter.join(timeout=0.2)
    release.set()
    maker.join(timeout=30)
    waiter.join(timeout=30)

    # Then it was made once, and both callers got it
    assert len(made) == 1
    assert results == {"maker": made[0], "waiter": made[0]}


def test_a_make_that_fails_leaves_nothing_and_the_next_caller_makes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SHARED_DIR, str(tmp_path))

    def broken(directory: Path) -> None:
        (directory / "half.txt").write_text("half")
        raise RuntimeError("synth failed")

    with pytest.raises(RuntimeError, match="synth failed"):
        made_once("stage dev", broken)
    made: list[Path] = []
    directory = made_once("stage dev", _maker(made))

    assert made == [directory]
    assert sorted(path.name for path in directory.iterdir()) == ["content.txt"]
