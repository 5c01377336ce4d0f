"""KServe 0.21's server-side behaviour, against real servers: routes of a script's own (tests/models/custom_routes.py,
what KServe scripts add to ``kserve.model_server.app``) with the lifecycle of every route, ``ModelServer.servers``,
the ``--protocol`` default and the ``--predictor_protocol`` spelling, and the served models an unknown model's 404
and NOT_FOUND name (a zoo of fourteen models)."""
import json
import signal
import threading

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import (
    assert_error_answer,
    eventually,
    post_json,
    request,
    run_python,
    scrape,
    side_by_side,
    triton_error,
    triton_input,
    v2_fp32_doc,
    value,
)

SCRIPT = "tests/models/custom_routes.py"
ZOO_NAMES = ["echo", "pipeline", "headers", "failing", "slow", "explained", "raw", "toggle", "received", "listed",
             "sleepy", "faulty", "where", "setheaders"]
UNKNOWN = "Request for unknown model: 'nope' is not found. Model with name nope does not exist."


@pytest.fixture(scope="module")
def routes(start_server):
    return start_server(SCRIPT, grpc=False)


def get(server, path, headers=None):
    return request(server.http_port, "GET", path, None, headers)


# --- routes of the script's own -----------------------------------------------------------------------------------
def test_route_functions_answer_with_their_call_s_request_id(routes):
    status, headers, body = get(routes, "/hello?name=ann", {"x-request-id": "route-1"})
    assert (status, json.loads(body)) == (200, {"hello": "ann"})
    assert headers["content-type"] == "application/json" and headers["x-request-id"] == "route-1"
    assert json.loads(get(routes, "/hello")[2]) == {"hello": "world"}
    status, headers, body = request(routes.http_port, "POST", "/echo/hi", b'{"a": [1, 2]}')
    assert (status, json.loads(body), headers["x-echo"]) == (201, {"word": "hi", "body": {"a": [1, 2]}}, "hi")
    status, headers, body = get(routes, "/text")
    assert (status, headers["content-type"], body) == (200, "text/plain; charset=utf-8", b"just text")
    ran_on = json.loads(get(routes, "/sync")[2])["thread"]
    assert ran_on.startswith("default"), ran_on  # a plain function runs in the server's thread pool


def test_a_handler_class_route_answers_with_the_request_id(routes):
    status, _, body = get(routes, "/handler/a/b", {"x-request-id": "class-1"})
    assert (status, json.loads(body)) == (200, {"handler": "a/b", "request_id": "class-1"})


@pytest.mark.parametrize("method,path,body,status,message", [
    ("GET", "/boom", None, 500, "RuntimeError : the route broke"),
    ("GET", "/refuse", None, 400, "this route refuses"),
    ("POST", "/hello", b"{}", 405, "Method Not Allowed"),
    ("DELETE", "/handler/x", None, 405, "Method Not Allowed"),
    ("PUT", "/handler/x", b"1", 400, "cannot put x"),
    ("POST", "/echo/hi", b"{nope", 400, "the request body is not JSON: "),
    ("POST", "/echo/hi", b"", 400, "the request body is empty; send a JSON document"),
    ("POST", "/echo/HI", b"{}", 404, "no route for POST /echo/HI"),
    ("GET", "/hello/more", None, 404, "no route for GET /hello/more"),
], ids=["raises", "invalid-input", "method-of-function", "method-of-class", "class-raises", "bad-json", "empty-body",
        "path-not-matched", "no-prefix-match"])
def test_route_errors_are_answered_as_error_json(routes, method, path, body, status, message):
    assert_error_answer(routes.http_port, request(routes.http_port, method, path, body), status, message)


def test_route_calls_are_access_logged_and_counted(routes):
    labels = dict(protocol="custom", endpoint="plain_text", model_name="")
    before = value(scrape(routes), "kserve_requests_total", status="200", **labels)
    failed_before = value(scrape(routes), "kserve_requests_total", protocol="custom", endpoint="boom",
                          model_name="", status="500")
    assert get(routes, "/text")[0] == 200 and get(routes, "/boom")[0] == 500
    eventually(lambda: value(scrape(routes), "kserve_requests_total", status="200", **labels) == before + 1)
    eventually(lambda: value(scrape(routes), "kserve_requests_total", protocol="custom", endpoint="boom",
                             model_name="", status="500") == failed_before + 1)
    log = routes.log_with('"GET /boom HTTP/1.1" 500')
    assert '"GET /text HTTP/1.1" 200 9 ' in log
    assert "GET /boom failed" in log and 'raise RuntimeError("the route broke")' in log  # the 500's traceback


def test_the_built_in_routes_answer_beside_them(routes):
    assert get(routes, "/v2/health/ready")[0] == 200
    status, _, body = post_json(routes.http_port, "/v1/models/doubler:predict", {"instances": [1, 2]})
    assert (status, body["predictions"]) == (200, [2, 4])


def test_every_worker_serves_the_routes(start_server):
    server = start_server(SCRIPT, "--workers", "2", grpc=False)
    pids = side_by_side(lambda: json.loads(get(server, "/sync")[2])["pid"], lambda seen: len(set(seen)) >= 2)
    assert len(set(pids)) == 2, pids
    assert server.log().count("background task ticks") >= 2  # ModelServer.servers runs in each worker
    server.stop()
    assert server.proc.returncode == 0 and "was never awaited" not in server.log()


def test_a_stopping_server_waits_for_a_route_call_and_refuses_new_ones(start_server):
    server = start_server(SCRIPT, "--grace_period", "30", grpc=False, env={"SLOW_SECONDS": "6"})
    slow = {}
    thread = threading.Thread(target=lambda: slow.update(answer=get(server, "/slow")))
    thread.start()
    eventually(lambda: value(scrape(server), "kserve_requests_in_flight", protocol="custom") == 1, 10)
    server.proc.send_signal(signal.SIGTERM)
    eventually(lambda: "Stopping the model server" in server.log())
    assert_error_answer(server.http_port, get(server, "/hello"), 503,
                        "Server is not ready. The server is shutting down.")
    thread.join(timeout=30)
    status, _, body = slow["answer"]
    assert (status, json.loads(body)) == (200, "done")
    assert server.wait_exit(timeout=20) == 0
    assert "Model server stopped" in server.log()


# --- ModelServer.servers -------------------------------------------------------------------------------------------
def test_a_coroutine_in_servers_runs_beside_the_server_and_ends_with_it(start_server):
    server = start_server(SCRIPT, grpc=False)
    server.log_with("background task ticks")
    assert get(server, "/hello")[0] == 200
    server.stop()
    assert server.proc.returncode == 0 and "was never awaited" not in server.log()


def test_a_failing_coroutine_in_servers_stops_the_server_with_its_error(start_server):
    server = start_server(SCRIPT, grpc=False, wait=False, env={"ROUTES_FAIL": "1"})
    assert server.wait_exit(timeout=30) == 1
    log = server.log()
    assert "an awaitable of ModelServer.servers failed (RuntimeError('background task broke')): stopping" in log
    assert "RuntimeError: background task broke" in log and "Model server stopped" in log


def test_something_not_awaitable_in_servers_is_refused_at_start(tmp_path):
    script = tmp_path / "bad_servers.py"
    script.write_text("import kserve_sdk as kserve\n\n\nclass M(kserve.Model):\n    def __init__(self):\n"
                      "        super().__init__('m')\n        self.ready = True\n\n\n"
                      "async def task():\n    pass\n\n\nserver = kserve.ModelServer()\nserver.servers.append(task)\n"
                      "server.start([M()])\n")
    out = run_python("", str(script), "--http_port", "0", "--enable_grpc", "false")
    assert out.returncode == 1, out.stderr
    assert "ModelServer.servers holds <function task at " in out.stderr
    assert "which is not awaitable: add a coroutine (my_task(), not my_task)" in out.stderr


# --- flags -------------------------------------------------------------------------------------------------------
PRINT_PROTOCOLS = """
    import argparse, json
    from kserve_sdk.model_server import args, parser
    script, _ = argparse.ArgumentParser(parents=[parser]).parse_known_args()
    print(json.dumps([args.protocol, args.predictor_protocol, parser.get_default("protocol"), script.protocol]))
"""


@pytest.mark.parametrize("argv,expected", [
    ([], ["v1", "v1", "v1", "v1"]),
    (["--predictor_protocol", "v2"], ["v1", "v2", "v1", "v1"]),  # the default v1 does not override it
    (["--protocol", "grpc-v2", "--predictor_protocol", "v2"], ["grpc-v2", "grpc-v2", "v1", "grpc-v2"]),
    (["-protocol=v2"], ["v2", "v2", "v1", "v2"]),
], ids=["none", "predictor-protocol", "protocol-wins", "one-dash"])
def test_protocol_defaults_to_v1_as_in_kserve(argv, expected):
    out = run_python(PRINT_PROTOCOLS, *argv)
    assert out.returncode == 0 and json.loads(out.stdout) == expected, out.stderr


@pytest.mark.parametrize("flag", ["--predictor_protocol", "--protocol"])
def test_a_protocol_in_the_wrong_case_is_refused_as_kserve_refuses_it(flag):
    out = run_python("import kserve_sdk.model_server", flag, "V2")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-1].endswith(
        f"error: argument {flag}/-{flag[2:]}: invalid choice: 'V2' (choose from 'v1', 'v2', 'grpc-v2')"), out.stderr


# --- an unknown model's 404 names the served ones --------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_zoo(start_server):
    return start_server("tests/models/zoo.py", env={"ZOO_MODELS": ",".join(ZOO_NAMES)})


def test_the_zoo_serves_fourteen_models(big_zoo):
    status, _, body = request(big_zoo.http_port, "GET", "/v1/models")
    assert status == 200 and sorted(json.loads(body)["models"]) == sorted(ZOO_NAMES)


LISTED = "Models served: echo, explained, failing, faulty, headers, listed, pipeline, raw, received, setheaders " \
         "and 4 more."


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/models/nope:predict", b'{"instances": [1]}'),
    ("POST", "/v2/models/nope/infer", json.dumps(v2_fp32_doc()).encode()),
    ("GET", "/v2/models/nope", None),
    ("GET", "/v2/models/nope/ready", None),
], ids=["v1-predict", "v2-infer", "v2-metadata", "v2-ready"])
def test_an_unknown_model_s_404_names_ten_served_models(big_zoo, method, path, body):
    assert_error_answer(big_zoo.http_port, request(big_zoo.http_port, method, path, body), 404, f"{UNKNOWN} {LISTED}")


def test_an_unknown_model_s_not_found_names_them_on_grpc(big_zoo):
    client = tgrpc.InferenceServerClient(big_zoo.grpc_url)
    try:
        x = triton_input(tgrpc, "INPUT0", np.array([1.0, 2.0], dtype=np.float32))
        assert triton_error(client.infer, "nope", [x]) == ("StatusCode.NOT_FOUND", f"{UNKNOWN} {LISTED}")
        assert triton_error(client.get_model_metadata, "nope") == ("StatusCode.NOT_FOUND", f"{UNKNOWN} {LISTED}")
    finally:
        client.close()


def test_a_server_of_one_model_names_it(routes):
    assert_error_answer(routes.http_port, request(routes.http_port, "GET", "/v2/models/nope/ready"), 404,
                        f"{UNKNOWN} Models served: doubler.")
    assert_error_answer(routes.http_port, request(routes.http_port, "POST", "/v1/models/nope:predict", b"{}"), 404,
                        f"{UNKNOWN} Models served: doubler.")
