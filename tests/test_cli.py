"""Flags, environment variables and start-up rules, as KServe defines them."""
import os
import subprocess
import sys
import tempfile

from helpers import ROOT, answers_ok, eventually, free_port, post_json, run_python


def test_flags_defaults_and_spellings():
    code = """
        import sys, json
        from kserve_sdk.model_server import args
        print(json.dumps(vars(args)))
    """
    import json
    defaults = json.loads(run_python(code).stdout)
    assert defaults["http_port"] == 8080 and defaults["grpc_port"] == 8081 and defaults["workers"] == 1
    assert defaults["max_threads"] == 4 and defaults["enable_grpc"] is True and defaults["model_name"] == "model"
    assert defaults["grpc_max_send_message_length"] == 8388608 == defaults["grpc_max_receive_message_length"]
    assert defaults["enable_latency_logging"] is True and defaults["configure_logging"] is True
    assert defaults["enable_docs_url"] is False and defaults["predictor_request_timeout_seconds"] == 600
    assert defaults["predictor_protocol"] == "v1"
    got = json.loads(run_python(code, "-http_port", "9000", "--enable_grpc=no", "-workers=2", "--unknown", "x",
                                "--enable_docs_url", "1", "-m", "slow").stdout)
    assert got["http_port"] == 9000 and got["enable_grpc"] is False and got["workers"] == 2
    assert got["enable_docs_url"] is True
    with tempfile.TemporaryDirectory() as root:  # a local STORAGE_URI must exist
        os.makedirs(os.path.join(root, "models", "m1"))
        env = json.loads(run_python(code, env={"PROTOCOL": "V2", "STORAGE_URI": "pvc://claim/models/m1",
                                               "KSERVE_SDK_PVC_ROOT": root}).stdout)
        assert env["predictor_protocol"] == "v2"
        assert env["model_dir"] == os.path.join(root, "models", "m1")
        local = json.loads(run_python(code, env={"STORAGE_URI": f"file://{root}/models"}).stdout)
        assert local["model_dir"] == os.path.join(root, "models")


def test_parser_is_extendable_by_user_scripts():
    code = """
        import argparse
        from kserve_sdk import model_server
        parser = argparse.ArgumentParser(parents=[model_server.parser])
        parser.add_argument("--threshold", type=float, default=0.5)
        args, _ = parser.parse_known_args()
        print(args.threshold, args.model_name, args.http_port)
    """
    out = run_python(code, "--threshold", "0.9", "--model_name", "m", "-http_port", "1234")
    assert out.stdout.split() == ["0.9", "m", "1234"], out.stderr


def test_no_ready_model_exits_non_zero(start_server):
    server = start_server("tests/models/zoo.py", env={"ZOO_MODELS": "never"}, grpc=False, wait=False)
    assert server.wait_exit() == 1
    assert "Model with name never is not ready." in server.log()


def test_run_as_module_with_model_name(start_server):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "samples.custom_model", "--model_name=flowers",
                             "--http_port", str(port), "--enable_grpc", "false"], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: answers_ok(f"http://127.0.0.1:{port}/v2/health/ready"), timeout=30)
        status, _, body = post_json(port, "/v1/models/flowers:predict",
                                    {"instances": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.8, 2.2]]})
        assert status == 200 and body == {"predictions": [0, 2]}
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_sigterm_stops_cleanly(start_server):
    server = start_server("tests/models/zoo.py", env={"ZOO_MODELS": "echo"}, grpc=False)
    server.stop()
    assert server.proc.returncode == 0
    assert "Model server stopped" in server.log()
