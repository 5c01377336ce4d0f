"""CloudEvents on v1 :predict and v2 /infer, binary and structured mode, against real servers.

Responses are parsed with the cloudevents SDK's own HTTP binding (``from_http``), not by hand.
"""
import base64
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat

from helpers import post_json, request

MODELS = {"ZOO_MODELS": "echo,raw,received"}
ENV = {"CE_TYPE": "org.example.scored", "CE_SOURCE": "urn:example:scorer", "CE_MERGE": "true"}
V1 = "/v1/models/received:predict"
V2 = "/v2/models/received/infer"
V2_ECHO = "/v2/models/echo/infer"
V2_DOC = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "INT32", "data": [7, 8]}]}
V2_OUT = [{"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 2], "data": [7, 8]}]
REQUEST_TIME = "2020-01-02T03:04:05Z"


@pytest.fixture(scope="module", params=["1", "2"], ids=["workers1", "workers2"])
def ce(start_server, request):
    return start_server("tests/models/zoo.py", "--workers", request.param, env=MODELS, grpc=False)


@pytest.fixture(scope="module")
def ce_env(start_server):
    return start_server("tests/models/zoo.py", env={**MODELS, **ENV}, grpc=False)


def binary(data: bytes, content_type="application/json", **extra):
    """A binary-mode request: the attributes in ce-* headers, the data as the body."""
    headers = {"ce-specversion": "1.0", "ce-id": "req-1", "ce-source": "urn:test", "ce-type": "test.request",
               "ce-time": REQUEST_TIME, **{f"ce-{k}": v for k, v in extra.items()}}
    if content_type:
        headers["Content-Type"] = content_type
    return data, headers


def structured(data=None, data_base64=None, **attributes):
    """A structured-mode request: the whole event as JSON."""
    event = {"specversion": "1.0", "id": "req-1", "source": "urn:test", "type": "test.request",
             "time": REQUEST_TIME, **attributes}
    if data is not None:
        event["data"] = data
    if data_base64 is not None:
        event["data_base64"] = base64.b64encode(data_base64).decode()
    return json.dumps(event).encode(), {"Content-Type": "application/cloudevents+json"}


def send(server, path, body_and_headers):
    """POST and parse the CloudEvent answer with the SDK; returns (event, mode, response headers)."""
    body, headers = body_and_headers
    status, hdrs, raw = request(server.http_port, "POST", path, body, headers)
    assert status == 200, raw
    event = from_http(HTTPMessage(headers=hdrs, body=raw), JSONFormat())
    mode = "binary" if "ce-id" in hdrs else "structured"
    if mode == "structured":
        assert hdrs["content-type"] == "application/cloudevents+json"
        assert not any(name.startswith("ce-") for name in hdrs)
    return event, mode, hdrs


def assert_fresh(event, source="io.kserve.inference.received", type_="io.kserve.inference.response"):
    assert event.get_specversion() == "1.0"
    assert event.get_id() != "req-1" and uuid.UUID(event.get_id()).version == 4
    assert abs(datetime.now(UTC) - event.get_time()) < timedelta(minutes=5)
    assert event.get_type() == type_
    assert event.get_source() == source


# --- the same mode back, with fresh attributes ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_v1_event_in_event_out(ce, mode):
    doc = {"instances": [[1, 2], [3, 4]]}
    req = binary(json.dumps(doc).encode()) if mode == "binary" else structured(doc)
    event, got_mode, hdrs = send(ce, V1, req)
    assert got_mode == mode
    assert_fresh(event)
    assert event.get_datacontenttype() == "application/json"
    assert event.get_data() == {"type": "dict", "value": doc}
    if mode == "binary":
        assert hdrs["content-type"] == "application/json"
        assert hdrs["ce-source"] == "io.kserve.inference.received"


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_v2_event_in_event_out(ce, mode):
    doc = {"id": "r9", **V2_DOC}
    req = binary(json.dumps(doc).encode()) if mode == "binary" else structured(doc)
    event, got_mode, _ = send(ce, V2_ECHO, req)
    assert got_mode == mode
    assert_fresh(event, source="io.kserve.inference.echo")
    assert event.get_data() == {"id": "r9", "model_name": "echo", "model_version": None, "outputs": V2_OUT}
    # the JSON event data is decoded into an InferRequest, as a plain v2 body is
    event, _, _ = send(ce, V2, binary(json.dumps(V2_DOC).encode()) if mode == "binary" else structured(V2_DOC))
    assert event.get_data() == {"type": "InferRequest", "inputs": ["INPUT0"]}


def test_v2_requested_outputs_apply_to_the_event(ce):
    doc = {**V2_DOC, "outputs": [{"name": "OUTPUT9"}]}
    status, _, body = request(ce.http_port, "POST", V2_ECHO, *binary(json.dumps(doc).encode()))
    assert status == 400 and "OUTPUT9" in json.loads(body)["error"]


def test_json_data_without_content_type_is_parsed(ce):
    event, _, _ = send(ce, V1, binary(b'{"instances": [5]}', content_type=None))
    assert event.get_data() == {"type": "dict", "value": {"instances": [5]}}


# --- non-JSON data reaches the model as bytes -------------------------------------------------------------
AVRO = b"\x02\x0ahello\x00\xff\xfe" * 5


@pytest.mark.parametrize("path", [V1, V2])
@pytest.mark.parametrize("payload", [AVRO, b"plain utf-8 text that is not JSON"])
def test_avro_binary_mode_reaches_model_as_bytes(ce, path, payload):
    event, mode, _ = send(ce, path, binary(payload, content_type="application/avro"))
    assert mode == "binary"
    assert event.get_data() == {"type": "bytes", "length": len(payload)}


def test_non_json_without_content_type_is_bytes(ce):
    event, _, _ = send(ce, V1, binary(AVRO, content_type=None))
    assert event.get_data() == {"type": "bytes", "length": len(AVRO)}


@pytest.mark.parametrize("path", [V1, V2])
def test_avro_structured_mode_data_base64_reaches_model_as_bytes(ce, path):
    event, mode, _ = send(ce, path, structured(data_base64=AVRO, datacontenttype="application/avro"))
    assert mode == "structured"
    assert event.get_data() == {"type": "bytes", "length": len(AVRO)}


def test_structured_text_data_with_non_json_type_is_bytes(ce):
    event, _, _ = send(ce, V1, structured("a,b\n1,2\n", datacontenttype="text/csv"))
    assert event.get_data() == {"type": "bytes", "length": 8}


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_bytes_from_the_model_are_the_event_data(ce, mode):
    doc = {"instances": ["bytes"]}
    req = binary(json.dumps(doc).encode()) if mode == "binary" else structured(doc)
    event, got_mode, hdrs = send(ce, "/v1/models/raw:predict", req)
    assert got_mode == mode
    assert event.get_datacontenttype() == "application/octet-stream"
    assert event.get_data() == b"\x00raw-bytes\xff"
    assert_fresh(event, source="io.kserve.inference.raw")


def test_numpy_response_in_a_structured_event(ce):
    event, _, _ = send(ce, "/v1/models/raw:predict", structured({"instances": [1]}))
    assert event.get_data() == {"predictions": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]}


# --- CE_TYPE, CE_SOURCE, CE_MERGE -------------------------------------------------------------------------
def test_env_binary_merge(ce_env):
    req = binary(json.dumps({"instances": [1]}).encode(), subject="order 42", partitionkey="p%201",
                 dataschema="urn:schema:in")
    event, mode, hdrs = send(ce_env, V1, req)
    assert mode == "binary"
    assert_fresh(event, source="urn:example:scorer", type_="org.example.scored")
    assert event.get_time() != datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)
    # the request's other attributes and extensions are copied, percent-encoding kept intact
    assert event.get_subject() == "order 42"
    assert event.get_extension("partitionkey") == "p 1"
    assert event.get_dataschema() == "urn:schema:in"
    assert event.get_data() == {"type": "dict", "value": {"instances": [1]}}


def test_env_structured_merge_keeps_extensions_but_not_the_data_type(ce_env):
    event, mode, _ = send(ce_env, V2, structured(data_base64=AVRO, datacontenttype="application/avro",
                                                  subject="s1", myext="v1"))
    assert mode == "structured"
    assert_fresh(event, source="urn:example:scorer", type_="org.example.scored")
    assert event.get_extension("myext") == "v1" and event.get_subject() == "s1"
    # datacontenttype describes the response data (JSON here), not the request's Avro
    assert event.get_datacontenttype() == "application/json"
    assert event.get_data() == {"type": "bytes", "length": len(AVRO)}


def test_default_server_does_not_merge(ce):
    event, _, _ = send(ce, V1, binary(b'{"instances": [1]}', subject="order 42", partitionkey="p1"))
    assert event.get_subject() is None and event.get_extension("partitionkey") is None


# --- bad events: 400 naming the problem -------------------------------------------------------------------
def _without(headers, *names):
    return {k: v for k, v in headers.items() if k not in names}


_HDRS = binary(b"")[1]
BAD = [
    ("missing ce-id and ce-type", b'{"instances": [1]}', _without(_HDRS, "ce-id", "ce-type"),
     "lacks the required header(s) ce-id, ce-type"),
    ("empty ce-source", b'{"instances": [1]}', {**_HDRS, "ce-source": ""},
     "Attribute 'source' must not be None or empty"),
    ("wrong specversion", b'{"instances": [1]}', {**_HDRS, "ce-specversion": "9.9"}, "'specversion' must be '1.0'"),
    ("bad time", b'{"instances": [1]}', {**_HDRS, "ce-time": "yesterday"}, "invalid CloudEvent attribute"),
    ("structured, bad time", structured({}, time="yesterday")[0], structured()[1], "invalid CloudEvent attribute"),
    ("structured, naive time", structured({}, time="2020-01-02T03:04:05")[0], structured()[1],
     "Attribute 'time' must be timezone aware"),
    ("JSON type, bad JSON", b'{"instances": [1', _HDRS, "the CloudEvent data is not valid JSON (application/json)"),
    ("structured, not JSON", b"<event/>", {"Content-Type": "application/cloudevents+json"},
     "the structured CloudEvent is not valid JSON"),
    ("structured, not an object", b"[1, 2]", {"Content-Type": "application/cloudevents+json"},
     "the structured CloudEvent must be a JSON object"),
    ("structured, no id/source", json.dumps({"specversion": "1.0", "type": "t", "data": {}}).encode(),
     {"Content-Type": "application/cloudevents+json"}, "lacks the required attribute(s) id, source"),
    ("structured, no data", structured()[0], structured()[1], "the CloudEvent has no data"),
    ("structured, bad base64", json.dumps({"specversion": "1.0", "id": "1", "type": "t", "source": "s",
                                           "data_base64": "%%%"}).encode(),
     {"Content-Type": "application/cloudevents+json"}, "data_base64 is not valid base64"),
    ("batch format", b"[]", {"Content-Type": "application/cloudevents-batch+json"}, "unsupported CloudEvents format"),
]


@pytest.mark.parametrize("path", [V1, V2])
@pytest.mark.parametrize("what,body,headers,message", BAD, ids=[b[0] for b in BAD])
def test_bad_events_are_400(ce, path, what, body, headers, message):
    status, hdrs, raw = request(ce.http_port, "POST", path, body, headers)
    assert status == 400, raw
    assert hdrs["content-type"] == "application/json"
    assert message in json.loads(raw)["error"]


def test_v2_event_data_without_inputs_is_400(ce):
    status, _, raw = request(ce.http_port, "POST", V2, *structured({"instances": [1]}))
    assert status == 400 and "has no 'inputs'" in json.loads(raw)["error"]


# --- ordinary requests are unaffected ---------------------------------------------------------------------
def test_ordinary_requests_unaffected(ce):
    status, hdrs, body = post_json(ce.http_port, V1, {"instances": [1]})
    assert status == 200 and body == {"type": "dict", "value": {"instances": [1]}}
    assert hdrs["content-type"] == "application/json" and not any(k.startswith("ce-") for k in hdrs)
    # a stray ce-* header without ce-specversion does not make a CloudEvent
    status, hdrs, body = post_json(ce.http_port, V2_ECHO, V2_DOC, {"ce-type": "x", "ce-id": "1"})
    assert status == 200 and body["outputs"] == V2_OUT
    assert not any(k.startswith("ce-") for k in hdrs)
    status, _, raw = request(ce.http_port, "POST", V1, b"{not json", {"Content-Type": "application/json"})
    assert status == 400 and "Unrecognized request format" in json.loads(raw)["error"]
