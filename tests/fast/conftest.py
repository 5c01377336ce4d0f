"""The fast tier: every test here is marked ``fast`` and runs in this process only.

Starting a process (subprocess, multiprocessing, os.fork/posix_spawn/system) inside a fast test fails the test
at once: a test that needs a server belongs beside the server-process tests in tests/, not here.
"""
import _posixsubprocess
import os
import subprocess
from pathlib import Path
from typing import Iterator, List

import pytest

HERE = Path(__file__).resolve().parent


class ProcessStarted(AssertionError):
    """A fast test tried to start a process."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise ProcessStarted(f"{what} called in the fast tier: tests/fast starts no process "
                             "(move the test beside the server-process tests in tests/)")

    return refuse


#: (module, attribute) of every way Python starts a process; each is replaced for a fast test's duration.
#: _posixsubprocess.fork_exec is what subprocess and multiprocessing's spawn and forkserver call underneath.
PROCESS_STARTERS = [(subprocess.Popen, "__init__"), (_posixsubprocess, "fork_exec"), (os, "fork"),
                    (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system"), (os, "popen")]


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def no_process_started(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every process starter raises ProcessStarted while a fast test runs."""
    for owner, name in PROCESS_STARTERS:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, _refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
    yield
