"""Fixtures: real servers on free loopback ports, stopped (by PID) when the tests are done. What tests share
besides fixtures is in tests/helpers.py."""
import os
from typing import List, Optional, Sequence

import pytest

# ROOT, Server, free_port, http_get, side_by_side and stop_process_group are imported from here by
# test files not yet moved to helpers.
from helpers import ROOT, Server, free_port, http_get, side_by_side, stop_process_group  # noqa: F401


@pytest.fixture(scope="session")
def start_server():
    """A factory: ``start_server("tests/models/x.py", "--flag", "v")``; every server is stopped at the end."""
    started: List[Server] = []

    def start(script: str, *args: str, env: Optional[dict] = None, grpc: bool = True, wait: bool = True,
              python_args: Sequence[str] = ()) -> Server:
        server = Server(os.path.join(ROOT, script), list(args), env=env, grpc=grpc, python_args=python_args)
        started.append(server)
        return server.start(wait_ready=wait)

    yield start
    for server in started:
        server.stop()
        os.unlink(server.log_file.name)


@pytest.fixture(scope="session")
def zoo(start_server, tmp_path_factory) -> Server:
    """One server with every test model of tests/models/zoo.py, REST and gRPC; its jobs (the fuzzer submits
    some) kept in a temporary SQLite file rather than the working directory."""
    jobs = tmp_path_factory.mktemp("zoo-jobs") / "jobs.sqlite3"
    return start_server("tests/models/zoo.py", "--jobs_store", f"sqlite:///{jobs}")
