"""Property-based tests: the tensor codecs round-trip every valid tensor and answer any invalid input with
our typed errors only; schemathesis drives the live server from the OpenAPI documents in protocol/.

Budgets are small and fixed (derandomized, no example database) so the suite stays fast and repeatable;
``hack/fuzz.sh`` runs the same properties with a long budget.
"""
import os
import struct

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from kserve_sdk.errors import InvalidInput, PayloadTooLarge
from kserve_sdk.protocol.binary import deserialize_bytes_tensor, serialize_bytes_tensor
from kserve_sdk.protocol.dtypes import NP_DTYPES
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.convert import infer_request_to_grpc, tolerant_parser
from kserve_sdk.protocol.infer_type import InferInput, InferRequest
from kserve_sdk.protocol.rest_codec import encode_infer_request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Examples per property; FUZZ_EXAMPLES raises it for a long run (hack/fuzz.sh).
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- valid tensors ---------------------------------------------------------------------------------------
NUMERIC = sorted(d for d in NP_DTYPES if d != "BYTES")
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3)


@st.composite
def tensors(draw, datatypes=tuple(NUMERIC) + ("BYTES",)):
    datatype = draw(st.sampled_from(datatypes))
    shape = draw(shapes)
    count = int(np.prod(shape)) if shape else 1
    if datatype == "BYTES":
        values = draw(st.lists(st.binary(max_size=12), min_size=count, max_size=count))
        array = np.empty(count, dtype=np.object_)
        array[:] = values
    else:
        dtype = NP_DTYPES[datatype]
        raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
        array = np.frombuffer(raw, dtype=dtype).copy()
        if datatype == "BOOL":
            array = array.astype(np.uint8).astype(np.bool_)
    return datatype, shape, array.reshape(shape)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f":  # NaN payloads compare by bits
        return a.shape == b.shape and a.tobytes() == b.tobytes()
    return a.shape == b.shape and np.array_equal(a, b)


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=20))
def test_bytes_codec_round_trip(items):
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    encoded = serialize_bytes_tensor(array)
    assert len(encoded) == sum(4 + len(i) for i in items)
    assert list(deserialize_bytes_tensor(encoded, len(items))) == items


@FUZZ
@given(st.binary(max_size=64), st.integers(-1, 8))
def test_bytes_codec_rejects_only_with_invalid_input(data, count):
    try:
        out = deserialize_bytes_tensor(data, count, "x")
    except InvalidInput as e:
        assert "input 'x'" in str(e)
        return
    assert count < 0 or len(out) == count
    assert serialize_bytes_tensor(out) == data  # what decodes re-encodes to the same bytes


@FUZZ
@given(st.lists(tensors(), min_size=1, max_size=3), st.booleans())
def test_rest_request_round_trip(specs, binary):
    """Valid tensors survive encode -> decode, as JSON data or as binary-extension bytes."""
    inputs = []
    for i, (datatype, shape, array) in enumerate(specs):
        tensor = InferInput(f"in{i}", shape, datatype)
        use_binary = binary or datatype in ("FP16",)
        if datatype == "BYTES" and not use_binary and not all(_is_text(v) for v in array.reshape(-1)):
            use_binary = True  # JSON carries BYTES as text
        if datatype.startswith("FP") and not use_binary and not np.all(np.isfinite(array.astype(np.float64))):
            use_binary = True  # JSON has no NaN/inf
        tensor.set_data_from_numpy(array, binary_data=use_binary)
        inputs.append(tensor)
    body, json_length = encode_infer_request(InferRequest("m", inputs))
    decoded = InferRequest.from_bytes(body, json_length, "m")
    for original, (datatype, shape, array) in zip(decoded.inputs, specs, strict=True):
        got = original.as_numpy()
        assert original.datatype == datatype and original.shape == shape
        if datatype == "BYTES":
            assert [bytes(v) if not isinstance(v, str) else v.encode() for v in got.reshape(-1)] == \
                [bytes(v) for v in array.reshape(-1)]
        else:
            assert _same(got.astype(array.dtype), array)


def _is_text(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@FUZZ
@given(st.lists(tensors(tuple(NUMERIC)), min_size=1, max_size=3))
def test_grpc_request_round_trip(specs):
    inputs = []
    for i, (datatype, shape, array) in enumerate(specs):
        tensor = InferInput(f"in{i}", shape, datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    message = infer_request_to_grpc(InferRequest("m", inputs))
    decoded = InferRequest.from_grpc(pb.ModelInferRequest.FromString(message.SerializeToString()))
    for tensor, (_, _, array) in zip(decoded.inputs, specs, strict=True):
        assert _same(tensor.as_numpy(), array)


# --- invalid input: only our typed errors ------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
datatypes = st.sampled_from(sorted(NP_DTYPES) + ["BF16", "fp32", "FLOAT", "", "BYTES "])
entries = st.fixed_dictionaries(
    {"name": st.text(max_size=6) | st.integers()},
    optional={"shape": st.lists(st.integers(-3, 2 ** 64), max_size=5) | json_values,
              "datatype": datatypes | json_values, "data": json_values,
              "parameters": st.fixed_dictionaries({}, optional={"binary_data_size": st.integers(-5, 2 ** 65)})
              | json_values})
documents = st.fixed_dictionaries({}, optional={
    "inputs": st.lists(entries | json_values, max_size=3) | json_values,
    "outputs": json_values, "parameters": json_values, "id": json_values})


def _decode_fully(body: bytes, json_length):
    request = InferRequest.from_bytes(body, json_length, "m")
    for tensor in request.inputs:
        tensor.as_numpy()
        if tensor.datatype == "BYTES":
            tensor.as_string()


@FUZZ
@given(documents, st.binary(max_size=48), st.booleans())
def test_json_decoder_raises_only_invalid_input(doc, tail, binary):
    header = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) if _dumpable(doc) else b"{}"
    body, json_length = (header + tail, len(header)) if binary else (header, None)
    try:
        _decode_fully(body, json_length)
    except InvalidInput:
        pass


def _dumpable(doc) -> bool:
    try:
        orjson.dumps(doc)
        return True
    except (orjson.JSONEncodeError, TypeError):
        return False


@FUZZ
@given(st.binary(max_size=200), st.integers(-2, 220))
def test_arbitrary_bytes_raise_only_invalid_input(body, json_length):
    try:
        _decode_fully(body, json_length if 0 <= json_length <= len(body) else None)
    except InvalidInput:
        pass


@FUZZ
@given(st.binary(max_size=200))
def test_grpc_parser_and_converter_raise_only_invalid_input(data):
    message = tolerant_parser(pb.ModelInferRequest)(data)
    try:
        request = InferRequest.from_grpc(message)
        for tensor in request.inputs:
            tensor.as_numpy()
    except InvalidInput:
        pass


@FUZZ
@given(st.lists(st.integers(-1, 2 ** 63), max_size=70), st.sampled_from(["FP32", "BYTES"]))
def test_shapes_are_checked_before_any_allocation(shape, datatype):
    doc = {"inputs": [{"name": "x", "shape": shape, "datatype": datatype,
                        "data": [1] if datatype != "BYTES" else ["a"]}]}
    try:
        request = InferRequest.from_dict(doc, "m")
        request.inputs[0].as_numpy()
    except InvalidInput as e:
        assert not isinstance(e, PayloadTooLarge)


def test_deep_nesting_is_refused():
    with pytest.raises(InvalidInput, match="depth limit exceeded"):
        InferRequest.from_bytes(b"[" * 5000 + b"]" * 5000, None, "m")
    lying = struct.pack("<I", 2 ** 32 - 1) + b"x"
    with pytest.raises(InvalidInput, match="runs past the end"):
        deserialize_bytes_tensor(lying, 1, "x")


# --- schemathesis against the live server ------------------------------------------------------------------
SCHEMATHESIS_EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "8"))
#: Served zoo models the generated requests are aimed at (else nearly every call would be a 404); on v2, the
#: ones that answer v2 responses (the others return v1 dicts, which the server passes on as they are).
TARGETS = {"rest_v1.yaml": ["echo", "failing", "raw", "explained", "pipeline", "headers"],
           "rest_v2.yaml": ["echo", "raw"]}


@pytest.mark.parametrize("document", ["rest_v1.yaml", "rest_v2.yaml"])
def test_openapi_conformance(zoo, document):
    """Every operation of the document, with generated valid and (for bodies) invalid requests: no 5xx that
    is not a model's own failure (named in the message), and every answer to a valid one conforms."""
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis.generation.modes import GenerationMode

    schema = schemathesis.openapi.from_path(os.path.join(ROOT, "protocol", document))
    problems, calls = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in ("/docs", "/metrics") or operation.path.endswith("/load") \
                or operation.path.endswith("/unload"):
            continue  # /docs is off by default; load/unload would change the zoo under other tests
        # invalid requests for bodies; the /versions/{v} twins of an operation share its handler and schema
        negative = operation.method == "post" and "{model_version}" not in operation.path
        modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if negative else [])
        for mode in modes:
            seen = []

            # run() is called right below, in this same turn of the loop, so the `seen` and `mode` it reads are
            # this turn's (B023 is for closures called later); @given refuses defaults to bind them by.
            @settings(max_examples=SCHEMATHESIS_EXAMPLES, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode), target=st.sampled_from(TARGETS[document] + [None]))
            def run(case, target):
                if target and isinstance(case.path_parameters, dict) and "model_name" in case.path_parameters:
                    case.path_parameters["model_name"] = target
                response = case.call(base_url=zoo.url, timeout=10)
                seen.append(1)  # noqa: B023 (called in this iteration, see above)
                problem = _problem(case, response, mode)  # noqa: B023 (called in this iteration, see above)
                if problem:
                    problems.append(problem)

            try:
                run()
            except Unsatisfiable:  # no invalid request exists for this operation
                pass
            calls += len(seen)
    assert calls > 20
    assert not problems, "\n".join(problems[:10])


def _problem(case, response, mode):
    status = response.status_code
    where = f"{case.method} {case.formatted_path} -> {status}"
    content_type = " ".join(response.headers.get("content-type", []))
    openai_route = case.path.startswith("/openai/")  # errors in OpenAI's shape: {"error": {"message": ...}}
    if status >= 500 and status not in (501, 503):
        try:
            message = response.json().get("error", "")
            message = message.get("message", "") if openai_route and isinstance(message, dict) else message
        except ValueError:
            message = response.text[:200]
        if "(model '" not in message and "model '" not in message:
            return f"{where}: a 5xx from our own code: {message}"
    if "json" in content_type and status >= 400:
        try:
            doc = response.json()
        except ValueError:
            return f"{where}: error body is not JSON"
        if openai_route:
            if set(doc) != {"error"} or not isinstance(doc["error"], dict) or \
                    not isinstance(doc["error"].get("message"), str):
                return f"{where}: error body {doc!r} is not OpenAI's {{'error': {{'message': str, ...}}}}"
        elif set(doc) != {"error"} or not isinstance(doc["error"], str):
            return f"{where}: error body {doc!r} is not {{'error': str}}"
    if "event-stream" in content_type:
        # schemathesis validates parsed SSE events against the document's `type: string`; check the events
        # are JSON documents instead
        for line in response.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":  # OpenAI streams end with [DONE]
                try:
                    orjson.loads(line[6:])
                except orjson.JSONDecodeError:
                    return f"{where}: event {line[:100]!r} is not JSON"
        return None
    if mode.name == "POSITIVE":
        from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance
        try:
            case.validate_response(response, checks=[response_schema_conformance, content_type_conformance])
        except (Exception, BaseExceptionGroup) as e:  # a FailureGroup naming each non-conformance
            if status < 500 or "(model '" not in response.text:
                inner = getattr(e, "exceptions", [e])
                return f"{where}: " + "; ".join(" ".join(str(x).split())[:300] for x in inner)
    return None
