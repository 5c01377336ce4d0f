"""OpenTelemetry tracing and Triton's trace extension, against a real OTLP/gRPC collector run by the test.

The servers export to a TraceService of opentelemetry-proto's generated code, on loopback; each test
sends its own trace ids and reads the spans of those traces. "No span" is shown with a marker: a traced
call sent after the calls that must leave none; the batch processor exports spans in the order they end,
so once the marker's span has arrived, any span of the earlier calls would have too.
"""
import json
import os
import secrets
import subprocess
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

from helpers import ROOT, Span, SpanCollector, http_get, post_json, read_sse, request, side_by_side
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from kserve_sdk.tracing.config import TracingConfig, read_config

SETOSA_MM = {"sepal_length_mm": 51, "sepal_width_mm": 35, "petal_length_mm": 14, "petal_width_mm": 2}
INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP span kinds


@pytest.fixture(scope="module")
def collector():
    receiver = SpanCollector().start()
    yield receiver
    receiver.stop()


def otel_env(collector: SpanCollector, service: str, **extra: str) -> Dict[str, str]:
    return collector.env(service, **extra)


def new_trace() -> tuple:
    """(trace id, parent span id, traceparent header) of a sampled client span."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


@pytest.fixture(scope="module")
def traced(start_server, collector):
    return start_server("tests/models/traced.py", env=otel_env(collector, "traced"))


def v2_request(model: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    return request


def marker(collector: SpanCollector, server) -> None:
    """A traced call to ``other``, waited for: the spans of every call answered before it are exported."""
    trace_id, _, traceparent = new_trace()
    assert post_json(server.http_port, "/v1/models/other:predict", {"instances": [1]},
                     {"traceparent": traceparent})[0] == 200
    collector.wait(lambda: collector.server_span_of(trace_id))


def server_span(spans: List[Span]) -> Span:
    (span,) = [s for s in spans if s.kind == SERVER]
    return span


# predictor protocol -> the transformer's script, the client's request, its answer, the spans' names
_FORWARDING = {
    "v1": ("samples/transformer/model.py", "/v1/models/iris:predict", {"instances": [SETOSA_MM]},
           {"predictions": ["setosa"]}, ("rest_v1", "predict", "200"), ("rest_v1", "predict", "200")),
    "grpc-v2": ("tests/models/grpc_transformer.py", "/v2/models/iris/infer",
                {"inputs": [{"name": "measurements_mm", "datatype": "FP32", "shape": [1, 4],
                             "data": list(SETOSA_MM.values())}]},
                None, ("rest_v2", "infer", "200"), ("grpc", "ModelInfer", "OK")),
}


@pytest.mark.parametrize("protocol", ["v1", "grpc-v2"])
def test_transformer_to_predictor_is_one_trace(start_server, collector, protocol):
    script, path, doc, answer, front_labels, back_labels = _FORWARDING[protocol]
    predictor = start_server("samples/custom_model/model.py", "--model_name", "iris", grpc=protocol == "grpc-v2",
                             env=otel_env(collector, "predictor"))
    port = predictor.grpc_port if protocol == "grpc-v2" else predictor.http_port
    transformer = start_server(script, "--model_name", "iris", "--predictor_host", f"127.0.0.1:{port}",
                               "--predictor_protocol", protocol, grpc=False, env=otel_env(collector, "transformer"))
    trace_id, client_span, traceparent = new_trace()
    status, headers, body = post_json(transformer.http_port, path, doc,
                                      {"traceparent": traceparent, "x-request-id": "traced-1"})
    assert status == 200 and (answer is None or body == answer), body
    assert headers["traceparent"].startswith(f"00-{trace_id}-")  # the answer names the transformer's span

    expected = {(service, name) for service, labels in (("transformer", front_labels), ("predictor", back_labels))
                for name in (" ".join(labels[:2]), "preprocess", "predict", "postprocess")}
    expected.add(("transformer", f"forward {protocol}"))

    def complete():  # every span of both services has arrived
        spans = collector.of(trace_id)
        return spans if expected <= {(s.resource["service.name"], s.name) for s in spans} else None

    spans = collector.wait(complete)
    by_service = {service: [s for s in spans if s.resource["service.name"] == service]
                  for service in ("transformer", "predictor")}
    front, back = server_span(by_service["transformer"]), server_span(by_service["predictor"])
    assert front.parent == client_span and front.name == " ".join(front_labels[:2])
    assert headers["traceparent"] == f"00-{trace_id}-{front.span_id}-01"
    for span, (kind, endpoint, code) in ((front, front_labels), (back, back_labels)):
        assert span.attributes == {"kserve.protocol": kind, "kserve.endpoint": endpoint,
                                   "kserve.request_id": "traced-1", "kserve.model_name": "iris",
                                   "kserve.status": code}
    (forward,) = [s for s in by_service["transformer"] if s.kind == CLIENT]
    assert forward.parent == front.span_id and forward.attributes["server.address"] == f"127.0.0.1:{port}"
    assert back.parent == forward.span_id
    for service, server in (("transformer", front), ("predictor", back)):
        stages = sorted((s for s in by_service[service] if s.parent == server.span_id and s.kind != CLIENT),
                        key=lambda s: ["preprocess", "predict", "postprocess"].index(s.name))
        assert [s.name for s in stages] == ["preprocess", "predict", "postprocess"], service


def test_grpc_traceparent_joins_the_trace_and_is_echoed(traced, collector):
    trace_id, client_span, traceparent = new_trace()
    with grpc.insecure_channel(traced.grpc_url) as channel:
        _, call = GRPCInferenceServiceStub(channel).ModelInfer.with_call(
            v2_request("echo"), metadata=(("traceparent", traceparent), ("x-request-id", "grpc-traced")))
    echoed = dict(call.trailing_metadata())["traceparent"]
    spans = collector.wait(lambda: len(collector.of(trace_id)) == 4 and collector.of(trace_id))
    server = server_span(spans)
    assert (server.name, server.parent, server.resource["service.name"]) == ("grpc ModelInfer", client_span, "traced")
    assert server.attributes == {"kserve.protocol": "grpc", "kserve.endpoint": "ModelInfer",
                                 "kserve.model_name": "echo",
                                 "kserve.request_id": "grpc-traced", "kserve.status": "OK"}
    assert echoed == f"00-{trace_id}-{server.span_id}-01"
    assert sorted(s.name for s in spans if s.parent == server.span_id) == ["postprocess", "predict", "preprocess"]


def test_a_failed_call_is_an_error_span_with_its_message(traced, collector):
    trace_id, _, traceparent = new_trace()
    status, headers, body = post_json(traced.http_port, "/v2/models/echo/infer", {"inputs": 5},
                                      {"traceparent": traceparent})
    assert status == 400 and headers["traceparent"].startswith(f"00-{trace_id}-")
    (span,) = collector.wait(lambda: collector.server_span_of(trace_id))
    assert span.attributes["kserve.status"] == "400" and span.events == ["exception"]
    assert span.attributes["kserve.error"] == body["error"]


def test_a_stream_is_one_span_with_its_chunk_count(traced, collector):
    trace_id, client_span, traceparent = new_trace()
    headers, events = read_sse(traced.url, "/v2/models/tokens/generate_stream",
                               {"text_input": "a b c", "parameters": {"delay_ms": 0}}, {"traceparent": traceparent})
    assert headers["traceparent"].startswith(f"00-{trace_id}-")
    assert [data["text_output"] for _, data in events] == ["a", " b", " c"]
    grpc_trace, _, grpc_parent = new_trace()
    request = pb.ModelInferRequest(model_name="tokens")
    tensor = request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"x y z w")
    request.parameters["delay_ms"].int64_param = 0
    with grpc.insecure_channel(traced.grpc_url) as channel:
        answers = list(GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([request]),
                                                                          metadata=(("traceparent", grpc_parent),)))
    assert len(answers) == 4 and not any(a.error_message for a in answers)
    marker(collector, traced)
    rest = server_span(collector.of(trace_id))
    assert (rest.parent, rest.attributes["kserve.endpoint"], rest.attributes["kserve.stream.chunks"]) == (
        client_span, "generate_stream", 3)
    over_grpc = server_span(collector.of(grpc_trace))
    assert (over_grpc.name, over_grpc.attributes["kserve.stream.chunks"]) == ("grpc ModelStreamInfer", 4)



def _counter_stream(server, start: int, traceparent: str, over_grpc: bool) -> List[int]:
    """The numbers of one traced stream of tests/models/batch_steps.py's counter (10 steps), SSE or gRPC."""
    if not over_grpc:
        _, events = read_sse(server.url, "/v2/models/counter/generate_stream",
                             {"text_input": str(start), "parameters": {"steps": 10}}, {"traceparent": traceparent})
        return [int(data["text_output"]) for _, data in events]
    request = pb.ModelInferRequest(model_name="counter")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"%d" % start)
    request.parameters["steps"].int64_param = 10
    with grpc.insecure_channel(server.grpc_url) as channel:
        answers = GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([request]),
                                                                     metadata=(("traceparent", traceparent),))
        answers = list(answers)
    assert not any(a.error_message for a in answers), answers[-1].error_message
    return [int(deserialize_bytes_tensor(a.infer_response.raw_output_contents[0])[0]) for a in answers]


def test_a_batched_step_is_a_span_linked_to_the_calls_it_served(start_server, collector):
    # Six concurrent streams, three over SSE and three over gRPC, each advanced by @kserve_sdk.batch steps.
    server = start_server("tests/models/batch_steps.py", env=otel_env(collector, "batch-steps"))
    traces = [new_trace() for _ in range(6)]
    with futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: _counter_stream(server, 100 * i, traces[i][2], over_grpc=i % 2 == 1),
                                range(6)))
    assert answers == [list(range(100 * i + 1, 100 * i + 11)) for i in range(6)]
    calls = {trace_id: collector.wait(lambda t=trace_id: collector.server_span_of(t))[0]
             for trace_id, _, _ in traces}

    def steps_of_all_calls():
        steps = [s for s in collector.spans if s.name == "batch step" and s.resource["service.name"] == "batch-steps"]
        return steps if sum(s.attributes["kserve.batch_size"] for s in steps) == 60 else None

    steps = collector.wait(steps_of_all_calls)
    call_ids = {(call.trace_id, call.span_id) for call in calls.values()}
    assert all(s.kind == INTERNAL and s.parent == "" and s.trace_id not in calls for s in steps)  # roots of their own
    assert all(s.attributes["kserve.model_name"] == "counter" and s.attributes["kserve.batch.method"] == "step"
               for s in steps)
    assert all(set(s.links) <= call_ids and len(s.links) == s.attributes["kserve.batch_size"] for s in steps)
    assert max(s.attributes["kserve.batch_size"] for s in steps) > 1
    assert all(sum(call in s.links for s in steps) == 10 for call in call_ids)  # each call's ten rows



def test_a_step_whose_calls_are_not_sampled_makes_no_span(start_server, collector):
    server = start_server("tests/models/batch_steps.py", env=otel_env(collector, "batch-steps-off"))
    assert post_json(server.http_port, "/v2/models/counter/trace/setting", {"trace_level": ["OFF"]})[0] == 200
    with futures.ThreadPoolExecutor(3) as pool:
        untraced = list(pool.map(lambda i: _counter_stream(server, 100 * i, new_trace()[2], over_grpc=False),
                                 range(3)))
    assert untraced == [list(range(100 * i + 1, 100 * i + 11)) for i in range(3)]
    assert post_json(server.http_port, "/v2/models/counter/trace/setting", {"trace_level": None})[0] == 200
    trace_id, _, traceparent = new_trace()  # the marker: a sampled stream alone, ten steps of one row
    assert _counter_stream(server, 0, traceparent, over_grpc=False) == list(range(1, 11))
    (call,) = collector.wait(lambda: collector.server_span_of(trace_id))

    def steps():
        found = [s for s in collector.spans if s.resource["service.name"] == "batch-steps-off" and s.kind == INTERNAL
                 and s.name == "batch step"]
        return found if len(found) >= 10 else None

    assert [(s.links, s.attributes["kserve.batch_size"]) for s in collector.wait(steps)] == [
        (((call.trace_id, call.span_id),), 1)] * 10  # none for the untraced streams' steps


def tokens_request(text: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="tokens")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(text.encode())
    request.parameters["delay_ms"].int64_param = 0
    return request


def stream_metadata(server, texts: List[str], traceparent: str) -> tuple:
    """(initial metadata, answers) of a ModelStreamInfer of one tokens request per text."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = GRPCInferenceServiceStub(channel).ModelStreamInfer(
            iter([tokens_request(text) for text in texts]),
            metadata=(("traceparent", traceparent), ("x-request-id", "stream-traced")), timeout=30)
        answers = list(call)
        return dict(call.initial_metadata()), answers


def test_a_grpc_stream_answers_the_traceparent_of_its_first_call(traced, collector):
    trace_id, client_span, traceparent = new_trace()
    metadata, answers = stream_metadata(traced, ["x y", "a b c"], traceparent)
    assert len(answers) == 5 and not any(a.error_message for a in answers)
    spans = collector.wait(lambda: len(collector.server_span_of(trace_id)) == 2 and collector.server_span_of(trace_id))
    (first,) = [s for s in spans if s.attributes["kserve.stream.chunks"] == 2]  # each request is a call
    assert {s.parent for s in spans} == {client_span}
    assert metadata["x-request-id"] == "stream-traced"
    assert metadata["traceparent"] == f"00-{trace_id}-{first.span_id}-01"


def test_an_untraced_grpc_stream_echoes_no_traceparent(start_server):
    server = start_server("tests/models/traced.py")  # no OTEL_* environment: tracing is off
    metadata, answers = stream_metadata(server, ["x y"], new_trace()[2])
    assert len(answers) == 2 and metadata["x-request-id"] == "stream-traced" and "traceparent" not in metadata


def test_a_batched_predict_span_has_its_batch_size_and_queue_wait(traced, collector):
    trace_id, _, traceparent = new_trace()
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    assert post_json(traced.http_port, "/v2/models/batched/infer", doc, {"traceparent": traceparent})[0] == 200
    spans = collector.wait(lambda: len(collector.of(trace_id)) == 4 and collector.of(trace_id))
    (predict,) = [s for s in spans if s.name == "predict"]
    assert predict.attributes["kserve.batch_size"] == 1 and predict.attributes["kserve.queue_ms"] > 0


def test_health_readiness_and_metrics_are_never_traced(traced, collector):
    trace_id, _, traceparent = new_trace()
    headers = {"traceparent": traceparent}
    for path in ("/", "/v2/health/live", "/v2/health/ready", "/metrics", "/v2/models/echo/ready", "/v1/models/echo"):
        status, answer_headers, _ = request(traced.http_port, "GET", path, headers=headers)
        assert status == 200 and "traceparent" not in answer_headers, path
    with grpc.insecure_channel(traced.grpc_url) as channel:
        stub, metadata = GRPCInferenceServiceStub(channel), (("traceparent", traceparent),)
        assert stub.ServerLive(pb.ServerLiveRequest(), metadata=metadata).live
        assert stub.ServerReady(pb.ServerReadyRequest(), metadata=metadata).ready
        assert stub.ModelReady(pb.ModelReadyRequest(name="echo"), metadata=metadata).ready
    marker(collector, traced)
    assert collector.of(trace_id) == []
    assert not [s for s in collector.spans if s.attributes.get("kserve.endpoint") in
                ("live", "ready", "model_ready", "metrics", "ServerLive", "ServerReady", "ModelReady")]


def test_trace_settings_through_tritonclient_http(traced, collector):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{traced.http_port}")
    defaults = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1", "log_frequency": "0",
                "trace_mode": "opentelemetry"}
    assert client.get_trace_settings() == defaults
    assert "trace" in client.get_server_metadata()["extensions"]
    # trace_rate 3 on one model: the first call of every three is traced
    assert client.update_trace_settings("other", {"trace_rate": "3"}) == {**defaults, "trace_rate": "3"}
    assert client.get_trace_settings("other")["trace_rate"] == "3" and client.get_trace_settings() == defaults
    traces = [new_trace() for _ in range(6)]
    for _, _, traceparent in traces:
        assert post_json(traced.http_port, "/v1/models/other:predict", {"instances": [1]},
                         {"traceparent": traceparent})[0] == 200
    assert client.update_trace_settings("other", {"trace_rate": None})["trace_rate"] == "1"  # back to global
    marker(collector, traced)
    assert [bool(collector.of(trace_id)) for trace_id, _, _ in traces] == [True, False, False, True, False, False]
    # trace_level OFF: none; trace_count 1: one more, then none
    client.update_trace_settings("echo", {"trace_level": ["OFF"]})
    off, _, traceparent = new_trace()
    assert post_json(traced.http_port, "/v1/models/echo:predict", {"instances": [1]},
                     {"traceparent": traceparent})[0] == 200
    client.update_trace_settings("echo", {"trace_level": None, "trace_count": "1"})
    counted = [new_trace() for _ in range(2)]
    for _, _, traceparent in counted:
        assert post_json(traced.http_port, "/v1/models/echo:predict", {"instances": [1]},
                         {"traceparent": traceparent})[0] == 200
    assert client.get_trace_settings("echo")["trace_count"] == "0"
    client.update_trace_settings("echo", {"trace_count": None})
    marker(collector, traced)
    assert collector.of(off) == [] and [bool(collector.of(t)) for t, _, _ in counted] == [True, False]
    with pytest.raises(InferenceServerException, match="trace_foo"):
        client.update_trace_settings(settings={"trace_foo": "1"})
    client.close()


def test_global_settings_count_calls_not_spans(traced, collector):
    """trace_count 2 traces two calls whole (server and stage spans), then none: a call's other spans follow
    its decision and do not count."""
    doc = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    assert post_json(traced.http_port, "/v2/trace/setting", {"trace_count": "2"})[0] == 200
    traces = [new_trace() for _ in range(3)]
    try:
        for _, _, traceparent in traces:
            assert post_json(traced.http_port, "/v2/models/batched/infer", doc, {"traceparent": traceparent})[0] == 200
        assert json.loads(http_get(traced.url + "/v2/trace/setting")[1])["trace_count"] == "0"
    finally:
        assert post_json(traced.http_port, "/v2/trace/setting", {"trace_count": "-1"})[0] == 200
    marker(collector, traced)
    assert [sorted(s.name for s in collector.of(t)) for t, _, _ in traces] == [
        ["postprocess", "predict", "preprocess", "rest_v2 infer"]] * 2 + [[]]


@pytest.mark.parametrize("body, status, message", [
    (b'{"trace_foo": "1"}', 400, "unknown trace setting 'trace_foo'; the settings are trace_level, trace_rate, "
                                 "trace_count, log_frequency"),
    (b'{"trace_rate": "often"}', 400,
     "trace_rate must be an integer of at least 1 (a string such as \"100\"); got 'often'"),
    (b'{"trace_rate": "0"}', 400, "trace_rate must be an integer of at least 1"),
    (b'{"trace_count": true}', 400, "trace_count must be an integer of at least -1"),
    (b'{"log_frequency": [1, 2]}', 400, "log_frequency must be an integer of at least 0"),
    (b'{"trace_level": ["LOUD"]}', 400, "trace_level must be a list of OFF, TIMESTAMPS, TENSORS; got ['LOUD']"),
    (b'{"trace_level": 3}', 400, "trace_level must be a list of OFF, TIMESTAMPS, TENSORS; got 3"),
    (b'{"trace_file": "/tmp/t.json"}', 400, "trace_file is not supported"),
    (b'{"trace_mode": "triton"}', 400, "trace_mode cannot be changed: this server traces with opentelemetry"),
    (b'[1]', 400, "the trace settings must be a JSON object of setting names and values; got list"),
    (b'{"trace_rate": ', 400, "Unrecognized request format"),
])
def test_bad_trace_settings_are_400_naming_them(traced, body, status, message):
    for path in ("/v2/trace/setting", "/v2/models/echo/trace/setting"):
        got, _, answer = request(traced.http_port, "POST", path, body, {"Content-Type": "application/json"})
        assert got == status and message in json.loads(answer)["error"], (path, answer)
    assert http_get(traced.url + "/v2/trace/setting")[1] and json.loads(http_get(traced.url + "/v2/trace/setting")[1])[
        "trace_rate"] == "1"  # nothing changed


def test_trace_settings_of_an_unknown_model_are_404(traced):
    for method, body in (("GET", None), ("POST", b'{"trace_rate": "2"}')):
        status, _, answer = request(traced.http_port, method, "/v2/models/nope/trace/setting", body)
        assert (status, json.loads(answer)) == (404, {"error": "Request for unknown model: 'nope' is not found. "
                                                               "Model with name nope does not exist. Models served: "
                                                               "batched, echo, other, tokens."})


def test_trace_settings_through_tritonclient_grpc(traced):
    client = grpcclient.InferenceServerClient(traced.grpc_url)
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert {k: v["value"] for k, v in settings.items()} == {
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1".split(), "trace_count": ["-1"], "log_frequency": ["0"],
        "trace_mode": ["opentelemetry"]}
    updated = client.update_trace_settings("echo", {"log_frequency": "50", "trace_level": ["TIMESTAMPS", "TENSORS"]},
                                           as_json=True)["settings"]
    assert updated["log_frequency"]["value"] == ["50"] and updated["trace_level"]["value"] == ["TIMESTAMPS", "TENSORS"]
    assert client.get_trace_settings("echo", as_json=True)["settings"]["log_frequency"]["value"] == ["50"]
    cleared = client.update_trace_settings("echo", {"log_frequency": None, "trace_level": None}, as_json=True)
    assert cleared["settings"]["log_frequency"]["value"] == ["0"]
    for settings, model, code, message in (
            ({"trace_foo": "1"}, "", "INVALID_ARGUMENT", "unknown trace setting 'trace_foo'"),
            ({"trace_rate": ["1", "2"]}, "", "INVALID_ARGUMENT", "trace_rate takes one value; got ['1', '2']"),
            ({"trace_count": "-5"}, "echo", "INVALID_ARGUMENT", "trace_count must be an integer of at least -1"),
            ({"trace_level": ["LOUD"]}, "", "INVALID_ARGUMENT", "trace_level must be a list of OFF, TIMESTAMPS"),
            ({"trace_rate": "2"}, "nope", "NOT_FOUND", "Model with name nope does not exist.")):
        with pytest.raises(InferenceServerException) as caught:
            client.update_trace_settings(model, settings)
        assert caught.value.status() == f"StatusCode.{code}" and message in caught.value.message(), settings
    client.close()


def test_two_workers_export_and_share_trace_settings(start_server, collector):
    server = start_server("tests/models/traced.py", "--workers", "2", grpc=False, env=otel_env(collector, "two"))

    def pids_of(traces) -> set:
        return {s.resource["process.pid"] for t in traces for s in collector.of(t) if s.kind == SERVER}

    def traced(model: str) -> str:
        trace_id, _, traceparent = new_trace()
        assert post_json(server.http_port, f"/v1/models/{model}:predict", {"instances": [1]},
                         {"traceparent": traceparent})[0] == 200
        return trace_id

    def exported(traces) -> list:  # once every call so far has its server span
        collector.wait(lambda: all(collector.server_span_of(t) for t in traces))
        return traces

    traces = side_by_side(lambda: traced("echo"), lambda traces: len(pids_of(exported(traces))) == 2)
    pids = pids_of(traces)
    assert len(pids) == 2 and all(s.resource["service.name"] == "two" for t in traces for s in collector.of(t))
    # a setting changed through one worker is in force in both
    status, _, _ = post_json(server.http_port, "/v2/models/echo/trace/setting", {"trace_level": ["OFF"]})
    assert status == 200
    # an untraced call, then a marker that is traced: once a marker is exported, so was (not) its call
    pairs = side_by_side(lambda: (traced("echo"), traced("other")),
                         lambda pairs: pids_of(exported([marker for _, marker in pairs])) == pids)
    assert pids_of([marker for _, marker in pairs]) == pids
    assert not [t for t, _ in pairs if collector.of(t)]


def test_otlp_over_http_protobuf(start_server):
    """OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: the spans are POSTed to <endpoint>/v1/traces."""
    received: List[trace_service_pb2.ExportTraceServiceRequest] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.append(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        server = start_server("tests/models/traced.py", grpc=False, env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "50"})
        trace_id, _, traceparent = new_trace()
        assert post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]},
                         {"traceparent": traceparent})[0] == 200
        server.stop()
        names = {(span.trace_id.hex(), span.name) for request in received for resource in request.resource_spans
                 for scope in resource.scope_spans for span in scope.spans}
        assert {(trace_id, n) for n in ("rest_v1 predict", "preprocess", "predict", "postprocess")} <= names
    finally:
        receiver.shutdown()


def test_shutdown_exports_the_spans_still_buffered(start_server, collector):
    """With workers, which leave by os._exit (no atexit hooks): the server's stop flushes."""
    server = start_server("tests/models/traced.py", "--workers", "2", grpc=False,
                          env=otel_env(collector, "stopping", OTEL_BSP_SCHEDULE_DELAY="600000"))
    trace_id, _, traceparent = new_trace()
    assert post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]},
                     {"traceparent": traceparent})[0] == 200
    server.stop()
    assert server.proc.returncode == 0
    assert {s.name for s in collector.of(trace_id)} == {"rest_v1 predict", "preprocess", "predict", "postprocess"}


@pytest.mark.parametrize("env, warning", [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "Tracing is off: OTEL_TRACES_EXPORTER='zipkin': 'zipkin' is not one of "
                                         "otlp, console, none"),
    ({"OTEL_PROPAGATORS": "tracecontext,nope"}, "Tracing is off: Propagator nope not found."),
])
def test_an_invalid_setting_warns_once_and_turns_tracing_off(start_server, collector, env, warning):
    server = start_server("tests/models/traced.py", grpc=False, env=otel_env(collector, "invalid", **env))
    trace_id, _, traceparent = new_trace()
    status, headers, _ = post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]},
                                   {"traceparent": traceparent})
    assert status == 200 and "traceparent" not in headers
    assert server.log().count("Tracing is off") == 1 and warning in server.log()
    assert json.loads(http_get(server.url + "/v2/trace/setting")[1])["trace_level"] == ["OFF"]
    status, _, answer = post_json(server.http_port, "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]})
    assert status == 400 and "tracing is not configured" in answer["error"]


def test_the_extra_missing_is_one_line_naming_it(start_server, collector, tmp_path):
    blocked = tmp_path / "opentelemetry"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ImportError('opentelemetry is not installed (blocked by the test)')\n")
    server = start_server("tests/models/traced.py", grpc=False,
                          env={**otel_env(collector, "no-extra"), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]})[0] == 200
    lines = [line for line in server.log().splitlines() if "kserve-sdk[tracing]" in line]
    assert len(lines) == 1 and "pip install 'kserve-sdk[tracing]'" in lines[0], server.log()


def test_tracing_off_imports_nothing_of_opentelemetry():
    code = ("import sys; from kserve_sdk import model_server, tracing; from kserve_sdk.handlers import grpc, http; "
            "assert tracing.setup() is False; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": ROOT},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, TracingConfig(["otlp"], "grpc", "parentbased_always_on", 1.0)),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
      "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
     TracingConfig(["otlp"], "http/protobuf", "traceidratio", 0.01)),
    ({"OTEL_TRACES_EXPORTER": "console,otlp"},
     TracingConfig(["console", "otlp"], "grpc", "parentbased_always_on", 1.0)),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, None),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_SAMPLER": "sometimes"}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_SAMPLER": "traceidratio",
      "OTEL_TRACES_SAMPLER_ARG": "2"}, None),
])
def test_the_environment_read(env, expected):
    assert read_config(env) == expected
