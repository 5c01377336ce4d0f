"""Start-up failures exit with status 1 and one line naming what to change; a flag that looks like a typo of
ours is warned about and the server still serves."""
import socket

import pytest

from helpers import free_port, http_get, run_python


def _one_error_line(log: str, text: str) -> None:
    errors = [row for row in log.splitlines() if " ERROR " in row]
    assert len(errors) == 1 and text in errors[0], log
    assert "Traceback" not in log, log


@pytest.fixture
def taken_port():
    """A port something else listens on (127.0.0.1), for the length of the test."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("flag", ["--http_port", "--grpc_port"])
def test_port_in_use_names_the_port_and_the_flag(start_server, taken_port, flag, workers):
    server = start_server("tests/models/zoo.py", flag, str(taken_port), "--workers", workers,
                          env={"ZOO_MODELS": "echo"}, wait=False)
    assert server.wait_exit() == 1
    _one_error_line(server.log(), f"{flag} {taken_port} is in use")


def test_same_port_for_rest_and_grpc_is_refused(start_server):
    port = str(free_port())
    server = start_server("tests/models/zoo.py", "--http_port", port, "--grpc_port", port, "--workers", "2",
                          env={"ZOO_MODELS": "echo"}, wait=False)
    assert server.wait_exit() == 1
    _one_error_line(server.log(), f"--grpc_port and --http_port are both {port}: give them different ports")


def test_local_storage_uri_that_does_not_exist_names_the_path(tmp_path):
    missing = tmp_path / "no-model-here"
    out = run_python("import kserve_sdk.model_server", env={"STORAGE_URI": f"file://{missing}"})
    assert out.returncode == 1
    _one_error_line(out.stderr, f"no such file or directory: {missing}")
    out = run_python("import kserve_sdk.model_server", env={"STORAGE_URI": str(missing)})
    assert out.returncode == 1
    _one_error_line(out.stderr, f"no such file or directory: {missing}")


def test_existing_local_storage_uri_is_used_in_place(tmp_path):
    out = run_python("from kserve_sdk.model_server import args; print(args.model_dir)",
                     env={"STORAGE_URI": f"file://{tmp_path}"})
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path), out.stderr


def test_near_miss_flag_warns_and_the_server_still_serves(start_server):
    server = start_server("tests/models/zoo.py", "--htpp_port", "1234", "--model-name=x", "--my_own_flag", "3",
                          env={"ZOO_MODELS": "echo"}, grpc=False)
    assert http_get(server.url + "/v2/models/echo/ready")[0] == 200
    log = server.log()
    assert "unknown flag --htpp_port ignored: did you mean --http_port?" in log, log
    assert "unknown flag --model-name ignored: did you mean --model_name?" in log, log
    assert "--my_own_flag" not in log and "WARNING" in log


def test_a_flag_the_script_defines_is_no_near_miss():
    code = """
        import argparse
        from kserve_sdk import model_server
        from kserve_sdk.logging import configure_logging
        from kserve_sdk.server.startup import warn_near_misses
        parser = argparse.ArgumentParser(parents=[model_server.parser])
        parser.add_argument("--batch_max_latency_ms", type=float)
        configure_logging(None)
        warn_near_misses(model_server._unknown_args, model_server.parser)
    """
    out = run_python(code, "--batch_max_latency_ms", "5", "--htpp_port", "1")
    assert out.returncode == 0, out.stderr
    assert "unknown flag --htpp_port ignored: did you mean --http_port?" in out.stderr, out.stderr
    assert "batch_max_latency_ms" not in out.stderr, out.stderr


def test_near_misses_leave_far_flags_and_values_alone():
    from kserve_sdk.server.startup import near_misses

    ours = ["--http_port", "--grpc_port", "--model_name", "--event-loop"]
    given = ["--htpp_port", "8080", "-grcp_port=1", "--threshold", "0.5", "-5", "--event_loop", "--", "-m"]
    assert near_misses(given, ours) == [("--htpp_port", "--http_port"), ("-grcp_port", "--grpc_port"),
                                        ("--event_loop", "--event-loop")]


def test_port_probe_accepts_a_free_port():
    from kserve_sdk.server.startup import check_port_free

    check_port_free("--grpc_port", free_port())
