"""Model states as Triton shows them, through tritonclient HTTP and gRPC and raw HTTP on a real server
(tests/models/triton_states.py): the unknown-model message in Triton's words, an unloaded model listed
UNAVAILABLE ("unloaded") and not ready rather than unknown, loaded again by a load; the ``config`` override
of a repository load (checked, shown by /config, used by the scheduler) and ``file:`` parameters refused;
versions checked against those served; with --workers 2, every worker's index after an unload.
"""
import base64
import http.client
import json
from typing import Any, Dict, Tuple

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from helpers import post_json_raw, request, side_by_side, triton_error, triton_input

SCRIPT = "tests/models/triton_states.py"
NOT_FOUND = "StatusCode.NOT_FOUND"
INVALID = "StatusCode.INVALID_ARGUMENT"


@pytest.fixture(scope="module")
def server(start_server):
    return start_server(SCRIPT)


@pytest.fixture
def grpc_client(server):
    client = tgrpc.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


@pytest.fixture
def http_client(server):
    client = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.close()


def pair(module) -> list:
    """INPUT0 = 0..15 and INPUT1 = ones, as tritonclient inputs of ``module``."""
    return [triton_input(module, "INPUT0", np.arange(16, dtype=np.int32).reshape(1, 16)),
            triton_input(module, "INPUT1", np.ones((1, 16), dtype=np.int32))]


def v2_body() -> bytes:
    return json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()


def error_of(answer: Tuple[int, Dict[str, str], bytes]) -> Tuple[int, str]:
    """(status, message) of a KServe-shaped error answer."""
    status, _, body = answer
    doc = json.loads(body)
    assert set(doc) == {"error"}, doc
    return status, doc["error"]


def rest_index(server, ready: bool = False) -> Dict[str, Dict[str, Any]]:
    status, _, body = post_json_raw(server.http_port, "/v2/repository/index", {"ready": ready})
    assert status == 200, body
    return {entry["name"]: entry for entry in json.loads(body)}


def grpc_index(client) -> Dict[str, Tuple[str, str]]:
    return {m.name: (m.state, m.reason) for m in client.get_model_repository_index().models}


def load(server, name: str, parameters: Any) -> Tuple[int, Dict[str, str], bytes]:
    return post_json_raw(server.http_port, f"/v2/repository/models/{name}/load", {"parameters": parameters})


def config_of(server, name: str) -> Dict[str, Any]:
    status, _, body = request(server.http_port, "GET", f"/v2/models/{name}/config")
    assert status == 200, body
    return json.loads(body)


# --- an unknown model, in Triton's words and KServe's ----------------------------------------------------------
@pytest.mark.parametrize("method,path,body", [
    ("GET", "/v2/models/nope", None),
    ("GET", "/v2/models/nope/ready", None),
    ("POST", "/v2/models/nope/infer", v2_body()),
    ("GET", "/v2/models/nope/config", None),
    ("GET", "/v2/models/nope/stats", None),
    ("POST", "/v2/repository/models/nope/unload", b""),
    ("POST", "/v2/repository/models/nope/load", b""),
], ids=["metadata", "ready", "infer", "config", "stats", "unload", "load"])
def test_an_unknown_model_is_named_in_tritons_words_over_rest(server, method, path, body):
    status, message = error_of(request(server.http_port, method, path, body))
    assert status == 404
    assert "Request for unknown model: 'nope' is not found" in message
    assert "Model with name nope does not exist." in message
    if path.endswith("/load"):  # Triton's model-control example looks for these words
        assert message.startswith("failed to load model 'nope': ")


def test_an_unknown_model_is_named_in_tritons_words_over_grpc(grpc_client):
    calls = [(grpc_client.get_model_metadata, ()), (grpc_client.get_model_config, ()),
             (grpc_client.infer, (pair(tgrpc),)), (grpc_client.get_inference_statistics, ()),
             (grpc_client.is_model_ready, ()), (grpc_client.unload_model, ()), (grpc_client.load_model, ())]
    for call, args in calls:
        status, message = triton_error(call, "nope", *args)
        assert status == NOT_FOUND, (call.__name__, message)
        assert "Request for unknown model: 'nope' is not found" in message, call.__name__
        assert "Model with name nope does not exist." in message, call.__name__


# --- an unloaded model stays listed, not ready, until a load serves it again ----------------------------------
def test_an_unloaded_model_is_listed_unavailable_and_not_ready_over_grpc(grpc_client):
    name = "unload-grpc"
    assert grpc_client.is_model_ready(name) is True
    grpc_client.unload_model(name)
    assert grpc_client.is_model_ready(name) is False  # ready: false, not NOT_FOUND
    assert grpc_index(grpc_client)[name] == ("UNAVAILABLE", "unloaded")
    unavailable = f"Request for unknown model: '{name}' has no available versions. Model {name} was unloaded"
    for call, args in [(grpc_client.infer, (pair(tgrpc),)), (grpc_client.get_model_metadata, ()),
                       (grpc_client.get_model_config, ())]:
        status, message = triton_error(call, name, *args)
        assert status == NOT_FOUND and message.startswith(unavailable), (call.__name__, message)
    grpc_client.unload_model(name)  # unloading it again changes nothing
    assert grpc_index(grpc_client)[name] == ("UNAVAILABLE", "unloaded")
    grpc_client.load_model(name)
    assert grpc_client.is_model_ready(name) is True and grpc_index(grpc_client)[name] == ("READY", "")
    result = grpc_client.infer(name, pair(tgrpc))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(1, 17, dtype=np.int32).reshape(1, 16))
    assert result.get_response().parameters["loads"].int64_param == 2  # its load() ran again


def test_an_unloaded_model_is_listed_unavailable_and_not_ready_over_rest(server, http_client):
    name = "unload-http"
    assert http_client.is_model_ready(name) is True
    http_client.unload_model(name)
    assert http_client.is_model_ready(name) is False
    status, message = error_of(request(server.http_port, "GET", f"/v2/models/{name}/ready"))
    assert status == 404 and f"'{name}' has no available versions. Model {name} was unloaded" in message
    assert rest_index(server)[name] == {"name": name, "state": "UNAVAILABLE", "reason": "unloaded"}
    assert name not in rest_index(server, ready=True)
    status, message = error_of(request(server.http_port, "POST", f"/v2/models/{name}/infer", v2_body()))
    assert status == 404 and message == (
        f"Request for unknown model: '{name}' has no available versions. Model {name} was unloaded: load it again "
        f"(POST /v2/repository/models/{name}/load) to serve it.")
    http_client.load_model(name)
    assert http_client.is_model_ready(name) is True
    assert rest_index(server, ready=True)[name] == {"name": name, "state": "READY"}
    result = http_client.infer(name, pair(thttp))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.arange(-1, 15, dtype=np.int32).reshape(1, 16))
    assert result.get_response()["parameters"]["loads"] == 2


# --- the config override of a load --------------------------------------------------------------------------------
@pytest.mark.parametrize("config,problem", [
    ("not json", "invalid config override: it is not JSON"),
    ("[1]", "invalid config override: the configuration must be a JSON object, got a list"),
    ('{"max_batch_size": -1}', "invalid config override: max_batch_size must be an integer from 0 to 2147483647, "
                               "got -1"),
    ('{"max_batch_size": "many"}', "max_batch_size must be an integer from 0 to 2147483647, got 'many'"),
    ('{"dynamic_batching": {"default_queue_policy": {"timeout_action": "DROP"}}}',
     "dynamic_batching.default_queue_policy.timeout_action must be REJECT or DELAY, got 'DROP'"),
    ('{"dynamic_batching": {"priority_levels": 2, "default_priority_level": 3}}',
     "invalid config override: default_priority_level 3 is above priority_levels 2"),
    ('{"dynamic_batching": {"default_queue_policy": {"allow_timeout_override": "yes"}}}',
     "allow_timeout_override must be true or false, got 'yes'"),
    ('{"sequence_batching": {}}', "invalid config override: sequence_batching cannot be applied by this server; "
                                  "the configuration takes name, platform, backend"),
    ('{"instance_group": [{"count": 1}, {"count": 1}]}', "instance_group names 2 groups"),
    ('{"instance_group": [{"kind": "KIND_GPU"}]}', "instance_group[0].kind 'KIND_GPU' cannot be honoured"),
    ('{"name": "other"}', "invalid config override: it names model 'other', not 'refused'"),
    (16, "the load parameter 'config' must be a string holding the model configuration as JSON, got int"),
], ids=["not-json", "not-object", "negative", "not-a-number", "action", "default-above-levels", "not-bool",
        "unsupported-field", "two-groups", "gpu", "other-name", "not-a-string"])
def test_a_bad_config_override_is_refused_and_changes_nothing_over_rest(server, config, problem):
    before = config_of(server, "refused")
    status, message = error_of(load(server, "refused", {"config": config}))
    assert status == 400 and message.startswith("failed to load model 'refused': ") and problem in message, message
    assert config_of(server, "refused") == before
    assert rest_index(server)["refused"] == {"name": "refused", "state": "READY"}


def test_a_load_body_that_is_not_json_is_refused(server):
    status, message = error_of(request(server.http_port, "POST", "/v2/repository/models/refused/load", b"{"))
    assert status == 400 and message.startswith("Unrecognized request format"), message
    status, message = error_of(post_json_raw(server.http_port, "/v2/repository/models/refused/load",
                                             {"parameters": ["config"]}))
    assert (status, message) == (400, "the 'parameters' of a repository load request must be a JSON object")


def test_a_bad_config_override_is_refused_over_grpc(grpc_client):
    # the wrong-format config of Triton's simple_grpc_model_control.py
    status, message = triton_error(grpc_client.load_model, "refused",
                                   config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert status == INVALID and message.startswith("failed to load model 'refused': invalid config override: it "
                                                    "is not JSON"), message
    status, message = triton_error(grpc_client.load_model, "refused", config='{"max_batch_size": 1.5}')
    assert (status, message) == (INVALID, "failed to load model 'refused': invalid config override: max_batch_size "
                                          "must be an integer from 0 to 2147483647, got 1.5")
    assert grpc_client.get_model_config("refused").config.max_batch_size == 8


def test_a_config_override_shows_in_the_config_and_schedules_the_model_over_grpc(grpc_client):
    name = "configured-grpc"
    grpc_client.infer(name, pair(tgrpc), priority=3)  # no priority levels yet: any priority is taken
    grpc_client.load_model(name, config='{"max_batch_size":"16","dynamic_batching":{"priority_levels":2}}')
    config = grpc_client.get_model_config(name).config
    assert (config.max_batch_size, config.dynamic_batching.priority_levels) == (16, 2)
    assert triton_error(grpc_client.infer, name, pair(tgrpc), priority=3) == (
        INVALID, "priority 3 is out of range: the model has priority_levels 2 (1 is the highest, 2 the lowest)")
    assert grpc_client.infer(name, pair(tgrpc), priority=2).as_numpy("OUTPUT0").shape == (1, 16)
    grpc_client.load_model(name)  # a load without the override puts the model's own configuration back
    config = grpc_client.get_model_config(name).config
    assert (config.max_batch_size, config.dynamic_batching.priority_levels) == (8, 0)
    grpc_client.infer(name, pair(tgrpc), priority=3)


def test_a_config_override_shows_in_the_config_and_schedules_the_model_over_rest(server, http_client):
    name = "configured-http"
    override = {"dynamic_batching": {"priority_levels": 3, "default_priority_level": 2, "default_queue_policy": {
        "timeout_action": "delay", "default_timeout_microseconds": "5000000", "max_queue_size": 4}},
        "instance_group": [{"kind": "KIND_CPU", "count": 2}]}
    http_client.load_model(name, config=json.dumps(override))
    config = config_of(server, name)
    assert config["max_batch_size"] == 8 and config["instance_group"] == [
        {"name": name, "kind": "KIND_CPU", "count": 2}]
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 10000, "priority_levels": 3, "default_priority_level": 2,
        "default_queue_policy": {"timeout_action": "DELAY", "default_timeout_microseconds": 5000000,
                                 "allow_timeout_override": True, "max_queue_size": 4}}
    doc = json.loads(v2_body())
    status, message = error_of(post_json_raw(server.http_port, f"/v2/models/{name}/infer",
                                             {**doc, "parameters": {"priority": 4}}))
    assert (status, message) == (400, "priority 4 is out of range: the model has priority_levels 3 (1 is the "
                                      "highest, 3 the lowest)")
    assert post_json_raw(server.http_port, f"/v2/models/{name}/infer", {**doc, "parameters": {"priority": 1}})[0] == 200
    assert load(server, name, {})[0] == 200
    assert "instance_group" not in config_of(server, name)


def test_file_overrides_are_refused(server, grpc_client):
    files = {"config": "{}", "file:1/model.onnx": base64.b64encode(b"weights").decode()}
    status, message = error_of(load(server, "refused", files))
    assert status == 400 and message.startswith(
        "failed to load model 'refused': file: overrides are not supported: this server builds its models from "
        "code, not from a model directory, so it cannot load 'file:1/model.onnx'"), message
    status, message = triton_error(grpc_client.load_model, "refused", config="{}",
                                   files={"file:1/model.onnx": b"weights"})
    assert status == INVALID and "file: overrides are not supported" in message, message
    assert grpc_client.is_model_ready("refused") is True


# --- versions --------------------------------------------------------------------------------------------------
NOT_A_NUMBER = "failed to get model version from specified version string 'abc': it is not a number."


@pytest.mark.parametrize("method,path,body,message", [
    ("POST", "/v2/models/simple/versions/abc/infer", v2_body(),
     f"{NOT_A_NUMBER} Model 'simple' has no version 'abc'; versions served: 1."),
    ("GET", "/v2/models/simple/versions/abc/ready", None, "Model 'simple' has no version 'abc'; versions served: 1."),
    ("GET", "/v2/models/simple/versions/3", None, "Request for unknown model: 'simple' version 3 is not found. "
                                                   "Model 'simple' has no version '3'; versions served: 1."),
    ("GET", "/v2/models/simple/versions/abc/config", None, "has no version 'abc'; versions served: 1."),
    ("GET", "/v2/models/simple/versions/abc/stats", None, "has no version 'abc'; versions served: 1."),
    ("POST", "/v2/models/versioned/versions/1/infer", v2_body(), "has no version '1'; versions served: 2."),
], ids=["infer", "ready", "metadata", "config", "stats", "other-version"])
def test_a_version_not_served_is_404_naming_those_served_over_rest(server, method, path, body, message):
    status, error = error_of(request(server.http_port, method, path, body))
    assert status == 404 and message in error, error


def test_the_versions_served_answer_over_rest(server, http_client):
    for path in ("/v2/models/simple/versions/1/infer", "/v2/models/versioned/versions/2/infer",
                 "/v2/models/versioned/infer"):
        assert request(server.http_port, "POST", path, v2_body())[0] == 200, path
    assert http_client.get_model_metadata("versioned")["versions"] == ["2"]
    assert http_client.get_model_metadata("simple")["versions"] == []
    assert http_client.is_model_ready("simple", "1") and http_client.is_model_ready("versioned", "2")
    assert not http_client.is_model_ready("versioned", "1")


def test_versions_are_checked_over_grpc(grpc_client):
    status, message = triton_error(grpc_client.infer, "simple", pair(tgrpc), model_version="abc")
    assert (status, message) == (NOT_FOUND, f"{NOT_A_NUMBER} Model 'simple' has no version 'abc'; versions served: 1.")
    for call, args in [(grpc_client.is_model_ready, ("simple", "3")), (grpc_client.get_model_metadata, ("simple", "3")),
                       (grpc_client.get_model_config, ("versioned", "1")),
                       (grpc_client.get_inference_statistics, ("simple", "9"))]:
        status, message = triton_error(call, *args)
        assert status == NOT_FOUND and "versions served: " in message, (call.__name__, message)
    assert grpc_client.is_model_ready("simple", "1") and grpc_client.is_model_ready("versioned", "2")
    assert grpc_client.infer("versioned", pair(tgrpc), model_version="2").get_response().model_version == "2"


# --- with workers --------------------------------------------------------------------------------------------
def _worker_view(port: int, name: str) -> Tuple[int, str, Any]:
    """On one connection (so one worker answers all three): that worker's pid, its index entry of ``name``
    (as sorted JSON) and the max_batch_size of its configuration of ``name`` (None when it has none)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/models/pid:predict", b'{"instances": [0]}', {"Content-Type": "application/json"})
        pid = json.loads(conn.getresponse().read())["predictions"][0]
        conn.request("POST", "/v2/repository/index", b"{}", {"Content-Type": "application/json"})
        entry = next(e for e in json.loads(conn.getresponse().read()) if e["name"] == name)
        conn.request("GET", f"/v2/models/{name}/config")
        answer = conn.getresponse()
        config = json.loads(answer.read())
        return pid, json.dumps(entry, sort_keys=True), config["max_batch_size"] if answer.status == 200 else None
    finally:
        conn.close()


def _views_of_both_workers(server, name: str) -> set:
    """What the workers answer about ``name`` (pid left out), asked side by side until both have answered."""
    answers = side_by_side(lambda: _worker_view(server.http_port, name),
                           lambda got: len({pid for pid, _, _ in got}) >= 2 and len(got) >= 16)
    assert len({pid for pid, _, _ in answers}) == 2, "both workers answered"
    return {(entry, size) for _, entry, size in answers}


def test_with_workers_every_index_agrees_after_an_unload_and_a_load(start_server):
    server = start_server(SCRIPT, "--workers", "2")
    client = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        client.unload_model("simple")
        unloaded = json.dumps({"name": "simple", "reason": "unloaded", "state": "UNAVAILABLE"})
        assert _views_of_both_workers(server, "simple") == {(unloaded, None)}
        client.load_model("simple", config='{"max_batch_size": 4}')  # the override is replayed too
        assert _views_of_both_workers(server, "simple") == {(json.dumps({"name": "simple", "state": "READY"}), 4)}
    finally:
        client.close()
        server.stop()
