"""The fast tier's guard: starting a process in a fast test fails it, whichever way the process is started;
and every test here carries the ``fast`` marker."""
import asyncio
import multiprocessing
import os
import subprocess
import sys

import pytest

from .conftest import ProcessStarted

STARTS = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    "subprocess.Popen": lambda: subprocess.Popen(["true"]),
    "subprocess.check_output": lambda: subprocess.check_output(["echo", "x"]),
    "os.fork": lambda: os.fork(),
    "os.posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
    "os.posix_spawnp": lambda: os.posix_spawnp("true", ["true"], {}),
    "os.system": lambda: os.system("true"),
    "os.popen": lambda: os.popen("true"),
    "multiprocessing spawn": lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    "multiprocessing fork": lambda: multiprocessing.get_context("fork").Process(target=print).start(),
    "asyncio subprocess": lambda: asyncio.run(asyncio.create_subprocess_exec("true")),
}


@pytest.mark.parametrize("start", STARTS.values(), ids=STARTS.keys())
def test_starting_a_process_fails_the_test(start):
    with pytest.raises(ProcessStarted, match="called in the fast tier"):
        start()


def test_every_test_here_is_marked_fast(request):
    assert request.node.get_closest_marker("fast") is not None
    assert any(line.startswith("fast:") for line in request.config.getini("markers"))  # declared in setup.cfg
