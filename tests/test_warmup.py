"""Model warm-up that gates readiness (Triton's model_warmup), on real servers of tests/models/warmup_models.py:
the server answers while a model warms up (live 200; the model and the server not ready, over REST v1, v2 and
gRPC), the warm-up runs through preprocess, predict and postprocess in every worker, generated inputs reach
predict with their shape and datatype, a failing warm-up keeps its model not ready (one log line, the
repository index's reason, a failed repository load), SIGTERM stops a server that is warming up, and a wrong
warm-up declaration stops the server at start."""
import json
import os
import re
import signal
import threading
import time

import pytest
import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException

from helpers import eventually, free_port, http_get, post_json, request, run_python, side_by_side

SCRIPT = "tests/models/warmup_models.py"
SLOW_WARMUP_S = 2.0  # the "slow" model's warm-up request sleeps this long in preprocess


def status(server, path):
    return http_get(server.url + path)[0]


def grpc_model_ready(server, name):
    """gRPC ModelReady of ``name``; the gRPC listener opens a moment after the HTTP one."""
    def asked():
        try:
            return [tgrpc.InferenceServerClient(server.grpc_url).is_model_ready(name)]
        except InferenceServerException as e:
            raise AssertionError(f"gRPC not answering yet: {e}") from None
    return eventually(asked, timeout=5)[0]


def v2_sleep(server, model, seconds=0.0):
    doc = {"inputs": [{"name": "sleep_s", "shape": [1], "datatype": "FP32", "data": [seconds]}]}
    code, _, body = post_json(server.http_port, f"/v2/models/{model}/infer", doc)
    assert code == 200, body
    return {out["name"]: out["data"] for out in body["outputs"]}


#: The models of the "main" set that warm up: each worker logs one "warmed up" line for each.
WARMED_MODELS = ("slow", "generated", "v1")


def warmed_up_ms(log, model):
    """The total ms of every "warmed up" line the log has for ``model`` (one per worker)."""
    return [float(ms) for ms in re.findall(rf"model '{model}' warmed up: \d+ warm-up requests? in ([\d.]+) ms", log)]


@pytest.fixture(scope="module")
def main(start_server):
    """The "main" models with two workers, and what was seen while they warmed up: the answers of the probes
    sent in the first second after the server went live, and when the slow model turned ready."""
    server = start_server(SCRIPT, "--workers", "2", env={"WARMUP_SET": "main"})
    live_at = time.monotonic()
    early = {path: status(server, path) for path in
             ("/v2/models/slow/ready", "/v1/models/slow", "/v2/health/ready", "/v2/health/live")}
    early["grpc ModelReady"] = grpc_model_ready(server, "slow")
    early_within_s = time.monotonic() - live_at
    eventually(lambda: status(server, "/v2/models/slow/ready") == 200, timeout=30, interval=0.02)
    ready_after_s = time.monotonic() - live_at
    # one worker is ready; the other may still be warming: the tests below ask whichever worker answers
    eventually(lambda: all(len(warmed_up_ms(server.log(), model)) == 2 for model in WARMED_MODELS), timeout=30)
    yield server, early, early_within_s, ready_after_s
    server.stop()


def test_a_model_is_not_ready_while_it_warms_up_and_ready_after(main):
    server, early, early_within_s, ready_after_s = main
    assert early_within_s < SLOW_WARMUP_S - 0.5, f"the early probes took {early_within_s:.2f} s"
    assert early == {"/v2/models/slow/ready": 503, "/v1/models/slow": 503, "/v2/health/ready": 503,
                     "/v2/health/live": 200, "grpc ModelReady": False}
    assert ready_after_s > SLOW_WARMUP_S - 0.5
    eventually(lambda: status(server, "/v2/health/ready") == 200, timeout=30)  # both workers, every model
    code, body = http_get(server.url + "/v1/models/slow")
    assert code == 200 and json.loads(body) == {"name": "slow", "ready": True}
    assert grpc_model_ready(server, "slow") is True
    log = eventually(lambda: len(warmed_up_ms(server.log(), "slow")) == 2 and server.log(), timeout=30)
    assert all(ms >= SLOW_WARMUP_S * 1000 - 50 for ms in warmed_up_ms(log, "slow")), log[-3000:]


def test_every_worker_warms_its_copy_through_preprocess_predict_and_postprocess(main):
    server = main[0]
    eventually(lambda: status(server, "/v2/health/ready") == 200, timeout=30)
    answers = side_by_side(lambda: v2_sleep(server, "slow"), lambda got: len({a["pid"][0] for a in got}) == 2)
    assert len({a["pid"][0] for a in answers}) == 2, "the calls reached one worker only"
    # each worker's copy saw its one warm-up request in every stage
    assert {tuple(a["warmup_calls"]) for a in answers} == {(1, 1, 1)}
    code, _, body = post_json(server.http_port, "/v1/models/v1:predict", {"instances": [[3, 4]]})
    assert code == 200 and body == {"predictions": [[3, 4]], "warmup_calls": [1, 1, 1]}, body  # the v1 dict warm-up
    assert len(re.findall(r"model 'v1' warmed up: 1 warm-up request in ", server.log())) == 2


def test_generated_warmup_inputs_reach_predict_with_their_shape_and_datatype(main):
    server = main[0]
    eventually(lambda: status(server, "/v2/health/ready") == 200, timeout=30)
    code, _, body = post_json(server.http_port, "/v1/models/generated:predict", {"instances": [1]})
    assert code == 200, body
    zeros, text = body["seen"][:2], body["seen"][2]
    assert len(body["seen"]) == 3  # count=2 of "zeros", then "text", each alone through the batcher
    for call in zeros:
        assert call["x"] == {"shape": [4, 3], "datatype": "FP32", "dtype": "float32", "zeros": True,
                             "range": [0.0, 0.0]}
        ids = call["ids"]
        assert (ids["shape"], ids["datatype"], ids["dtype"]) == ([4, 2], "INT64", "int64")
        assert 0 <= ids["range"][0] <= ids["range"][1] < 100 and not ids["zeros"], ids
    assert text == {"s": {"shape": [1, 2], "datatype": "BYTES", "dtype": "object", "zeros": True, "range": None}}
    assert len(re.findall(r"model 'generated' warmed up: 3 warm-up requests in ", server.log())) == 2


FAILURE = "warm-up warmup[1] ('boom') failed: ValueError: the weights are not loaded"


@pytest.fixture(scope="module")
def failing(start_server):
    server = start_server(SCRIPT, env={"WARMUP_SET": "failing"})
    yield server
    server.stop()


def test_a_failing_warmup_keeps_the_model_not_ready_with_one_log_line_and_the_index_reason(failing):
    log = failing.log_with(f"model 'failing' is not ready: {FAILURE}")
    assert log.count("model 'failing' is not ready") == 1
    assert eventually(lambda: status(failing, "/v2/models/v1/ready") == 200)
    assert status(failing, "/v2/models/failing/ready") == 503 and status(failing, "/v1/models/failing") == 503
    assert status(failing, "/v2/health/ready") == 503
    code, _, body = post_json(failing.http_port, "/v1/models/failing:predict", {"instances": [[1]]})
    assert code == 503 and "Model with name failing is not ready." in body["error"]
    index = post_json(failing.http_port, "/v2/repository/index", {})[2]
    assert {"name": "failing", "state": "UNAVAILABLE", "reason": FAILURE} in index
    assert {"name": "v1", "state": "READY"} in index


def test_a_repository_load_warms_the_model_up_before_it_is_ready_and_a_failing_warmup_fails_it(failing):
    code, _, body = post_json(failing.http_port, "/v2/repository/models/loaded-failing/load", {})
    assert code == 500 and body["error"] == f"failed to load model 'loaded-failing': {FAILURE}", body
    index = post_json(failing.http_port, "/v2/repository/index", {})[2]
    assert {"name": "loaded-failing", "state": "UNAVAILABLE", "reason": FAILURE} in index
    assert status(failing, "/v2/models/loaded-failing/ready") == 503

    answered = []
    loading = threading.Thread(target=lambda: answered.append(
        request(failing.http_port, "POST", "/v2/repository/models/loaded-good/load", b"{}")))
    loading.start()
    try:  # its warm-up request sleeps 0.5 s in preprocess: meanwhile it is loading, not ready
        entry = {"name": "loaded-good", "state": "LOADING", "reason": "the model is warming up"}
        eventually(lambda: entry in post_json(failing.http_port, "/v2/repository/index", {})[2], interval=0.02)
        assert status(failing, "/v2/models/loaded-good/ready") == 503
    finally:
        loading.join(30)
    assert answered and answered[0][0] == 200, answered
    assert status(failing, "/v2/models/loaded-good/ready") == 200  # ready once the load has answered
    assert v2_sleep(failing, "loaded-good")["warmup_calls"] == [1, 1, 1]


def test_sigterm_stops_a_server_while_a_warmup_runs(start_server):
    server = start_server(SCRIPT, env={"WARMUP_SET": "stopping"})
    entry = {"name": "endless", "state": "LOADING", "reason": "the model is warming up"}
    eventually(lambda: entry in post_json(server.http_port, "/v2/repository/index", {})[2])
    assert status(server, "/v2/models/endless/ready") == 503
    stopped_at = time.monotonic()
    os.killpg(server.proc.pid, signal.SIGTERM)
    assert server.wait_exit(20) == 0
    assert time.monotonic() - stopped_at < 10
    log = server.log()
    assert "Model server stopped" in log and "is not ready:" not in log and "warmed up" not in log, log[-3000:]


@pytest.mark.parametrize("which, message", [
    ("bad-count", "ValueError: Warmup 'w': count must be an integer of at least 1, got 0"),
    ("bad-item", "model 'bad': warmup[0] is a str, not a request body (a dict) or a kserve_sdk.Warmup"),
])
def test_a_wrong_warmup_declaration_stops_the_server_at_start(which, message):
    done = run_python("", SCRIPT, "--http_port", str(free_port()), "--grpc_port", str(free_port()),
                      env={"WARMUP_SET": which})
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
    assert "Serving HTTP" not in done.stdout + done.stderr
    if which == "bad-item":  # the server's own check: one line, no traceback
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
