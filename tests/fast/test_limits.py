"""The limits of protocol/tensor.py, binary.py and rest_codec.py in-process: BYTES elements past their count
refused before any is read, split by numpy or one at a time with the same result, JSON lists nested past any
shape, zero-sized shapes numpy cannot hold; and the statuses of the new typed errors."""
import json
import struct

import numpy as np
import orjson
import pytest

from kserve_sdk.errors import HeadersTooLarge, InvalidInput, UnsupportedEncoding, status_of
from kserve_sdk.protocol import binary
from kserve_sdk.protocol.binary import deserialize_bytes_tensor, serialize_bytes_tensor
from kserve_sdk.protocol.infer_type import InferInput, InferRequest
from kserve_sdk.protocol.rest_codec import decode_infer_request
from kserve_sdk.protocol.tensor import (
    MAX_BYTES_ELEMENTS,
    MAX_DIMS,
    NUMPY_MAX_ELEMENTS,
    DataDoesNotFit,
    check_bytes_elements,
    check_tensor_header,
)


def _packed(elements) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


@pytest.mark.parametrize("elements", [
    [b"ab"] * 100,  # all of one length: cut out by numpy
    [b"\x00\x00"] * 100,  # NUL bytes kept (a numpy bytes dtype would strip trailing ones)
    [b""] * 100,
    [b"a", b"bc"] * 50,  # lengths differ: one at a time
    [b"x" * 70000] * 64,
], ids=["equal", "nuls", "empty", "mixed", "large"])
def test_bytes_elements_decode_alike_however_they_are_split(elements):
    raw = _packed(elements)
    for buffer in (raw, memoryview(raw), bytearray(raw)):
        out = deserialize_bytes_tensor(buffer, len(elements), "b")
        assert out.dtype == object and out.tolist() == elements
        assert all(type(item) is bytes for item in out)
    assert deserialize_bytes_tensor(raw).tolist() == elements
    assert serialize_bytes_tensor(deserialize_bytes_tensor(raw, len(elements))) == raw


@pytest.mark.parametrize("count", [1, binary.SPLIT_BY_NUMPY_FROM])
def test_decoding_stops_at_the_first_element_past_the_shape(count, monkeypatch):
    calls = []
    real = struct.Struct.unpack_from
    monkeypatch.setattr(binary, "_LEN", type("Counting", (), {
        "unpack_from": staticmethod(lambda *a: calls.append(a) or real(struct.Struct("<I"), *a))})())
    raw = _packed([b"a", b"bc"] * 5000)
    with pytest.raises(InvalidInput, match=f"input 'b': more than {count} BYTES elements given but the shape "
                                           f"needs {count}"):
        deserialize_bytes_tensor(raw, count, "b")
    assert len(calls) <= count + 2  # not the 10,000 the data holds


@pytest.mark.parametrize("raw,count,message", [
    (_packed([b"ab"] * 63) + b"\x05\x00\x00\x00ab", 64, "BYTES element length 5 at offset 378 runs past the end"),
    (_packed([b"ab"] * 64) + b"\x01", 64, "BYTES element at offset 384 has a truncated length prefix"),
    (_packed([b"ab"] * 64), 65, "64 BYTES elements given but the shape needs 65"),
])
def test_broken_bytes_content_of_many_elements_is_named(raw, count, message):
    with pytest.raises(InvalidInput, match=f"input 'b': {message}"):
        deserialize_bytes_tensor(raw, count, "b")


def test_bytes_inputs_past_the_element_limit_are_refused_by_their_shapes():
    many = InferInput("a", [MAX_BYTES_ELEMENTS], "BYTES")
    check_bytes_elements([many, InferInput("n", [10 ** 9], "FP32")])  # other datatypes do not count
    with pytest.raises(InvalidInput, match=f"the request's BYTES inputs hold {MAX_BYTES_ELEMENTS + 1} elements in "
                                           f"all; a request may carry at most {MAX_BYTES_ELEMENTS}"):
        check_bytes_elements([many, InferInput("b", [1], "BYTES")])


def test_a_rest_request_past_the_element_limit_is_refused_before_its_data_is_read():
    count = MAX_BYTES_ELEMENTS * 4
    header = json.dumps({"inputs": [{"name": "b", "shape": [count], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": 4 * count}}]}).encode()
    body = header + bytes(4 * count)  # as many empty elements
    with pytest.raises(InvalidInput, match=f"hold {count} elements in all; a request may carry at most"):
        decode_infer_request(InferRequest, body, len(header), "m")
    doc = {"inputs": [{"name": "j", "shape": [count], "datatype": "BYTES", "data": ["x"] * count}]}
    with pytest.raises(InvalidInput, match=f"hold {count} elements in all"):  # JSON data counts the same
        decode_infer_request(InferRequest, json.dumps(doc).encode(), None, "m")


def _nested(depth: int, leaf):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def test_bytes_json_nested_past_any_shape_does_not_fit():
    deep = orjson.loads("[" * 995 + '"a"' + "]" * 995)  # as the server parses it: deeper than Python recurses
    with pytest.raises(DataDoesNotFit, match="input 's': data does not fit datatype BYTES: its lists nest more "
                                             f"than {MAX_DIMS} levels deep, deeper than any shape"):
        InferInput("s", [1], "BYTES", deep).as_numpy()
    assert InferInput("s", [1] * MAX_DIMS, "BYTES", _nested(MAX_DIMS, "a")).as_numpy().reshape(-1).tolist() == ["a"]
    mixed = [["a", ["b"]], "c", ("d",)]  # ragged nesting: values kept in order, as before
    assert InferInput("s", [4], "BYTES", mixed).as_numpy().tolist() == ["a", "b", "c", "d"]
    with pytest.raises(DataDoesNotFit, match="a BYTES element is a JSON object, not text"):
        InferInput("s", [2], "BYTES", [["a"], [{"k": 1}]]).as_numpy()


@pytest.mark.parametrize("shape", [[0, 2 ** 62], [2 ** 31, 0, 2 ** 31], [0, NUMPY_MAX_ELEMENTS + 1]])
def test_a_zero_sized_shape_numpy_cannot_hold_is_refused(shape):
    with pytest.raises(InvalidInput, match=rf"shape \[{', '.join(map(str, shape))}\] of input 'x' is too large: "
                                           "its dimensions other than 0 multiply to more than "
                                           f"{NUMPY_MAX_ELEMENTS}, the most a numpy array holds"):
        check_tensor_header("x", shape, "FP32")


@pytest.mark.parametrize("datatype", ["FP64", "BYTES", "BOOL"])
def test_a_zero_sized_shape_numpy_holds_is_read(datatype):
    shape = check_tensor_header("x", [0, NUMPY_MAX_ELEMENTS], datatype)
    assert InferInput("x", shape, datatype, []).as_numpy().shape == (0, NUMPY_MAX_ELEMENTS)
    assert np.empty(shape, np.float64).size == 0  # numpy's own bound: 8-byte items


def test_the_new_refusals_have_their_statuses():
    assert status_of(HeadersTooLarge("h")) == (431, "h")
    assert status_of(UnsupportedEncoding("e")) == (415, "e")
    assert HeadersTooLarge("h").grpc_code == UnsupportedEncoding("e").grpc_code == "INVALID_ARGUMENT"
