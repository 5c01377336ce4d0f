"""The pure pieces of Triton's wire behaviours: classification strings, class counts, CUDA shared memory without
a GPU, gRPC answers in raw contents, Triton's mixed-contents message, decoupled final responses and response ids
(the server-process tests are tests/test_triton_wire.py)."""
import asyncio

import numpy as np
import pytest

from kserve_sdk.errors import InvalidInput, SharedMemoryForbidden
from kserve_sdk.handlers.inference import v2_answer
from kserve_sdk.protocol.classification import class_count, top_classes
from kserve_sdk.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve_sdk.protocol.grpc.convert import (
    Undecodable,
    infer_request_from_grpc,
    infer_response_to_grpc,
    wants_empty_final_response,
    with_final_response,
)
from kserve_sdk.protocol.infer_type import InferOutput, InferRequest, InferResponse, RequestedOutput
from kserve_sdk.triton import cuda_shared_memory
from kserve_sdk.triton.cuda_shared_memory import CudaRegionNotFound, CudaSharedMemoryUnsupported


# --- classification ----------------------------------------------------------------------------------------
def _classes(values, datatype: str, count: int, labels=None):
    tensor = InferOutput("OUT", list(np.shape(values)), datatype, data=np.array(values))
    out = top_classes(tensor, count, labels)
    return out.datatype, out.shape, out.as_numpy().tolist()


def test_top_classes_per_row_with_labels():
    scores = np.array([[1.0, 5.0, 10.0, 4.0], [0.5, 0.25, 0.75, 0.0]], dtype=np.float32)
    assert _classes(scores, "FP32", 2, ["a", "b", "c", "d"]) == (
        "BYTES", [2, 2], [[b"10.000000:2:c", b"5.000000:1:b"], [b"0.750000:2:c", b"0.500000:0:a"]])


def test_integer_scores_are_written_as_integers_and_ties_go_to_the_lower_index():
    assert _classes([[3, 7, 7, 1]], "INT64", 3) == ("BYTES", [1, 3], [[b"7:1", b"7:2", b"3:0"]])
    biggest = np.array([[2 ** 64 - 1, 0]], np.uint64)
    assert _classes(biggest, "UINT64", 1) == ("BYTES", [1, 1], [[b"18446744073709551615:0"]])


def test_a_one_dimensional_output_is_one_row_and_the_count_is_capped():
    assert _classes(np.array([1, 5, 10, 4], dtype=np.int8), "INT8", 9) == (
        "BYTES", [4], [b"10:2", b"5:1", b"4:3", b"1:0"])


def test_labels_by_output_name_and_classes_past_the_labels():
    assert _classes([[0.1, 0.9]], "FP64", 2, ["only"]) == ("BYTES", [1, 2], [[b"0.900000:1", b"0.100000:0:only"]])


@pytest.mark.parametrize("datatype, values", [("BOOL", [[True, False]]), ("BYTES", [[b"a", b"b"]])])
def test_an_output_without_scores_cannot_be_classified(datatype, values):
    with pytest.raises(InvalidInput) as info:
        _classes(np.array(values, dtype=np.object_ if datatype == "BYTES" else bool), datatype, 1)
    assert str(info.value) == (f"output 'OUT' cannot be classified (class_count 1): class result not available "
                               f"for output due to unsupported type '{datatype}'")


@pytest.mark.parametrize("count", [0, -1, 1.0, "2", None, False])
def test_a_bad_class_count_is_refused(count):
    with pytest.raises(InvalidInput) as info:
        class_count(RequestedOutput("OUT", {"classification": count}))
    assert str(info.value) == ("invalid value for 'classification' parameter of output 'OUT': the class count "
                               f"(class_count) must be an integer of at least 1, got {count!r}")


def test_class_count_read_and_refused_beside_shared_memory():
    assert class_count(RequestedOutput("OUT", {"binary_data": True})) is None
    assert class_count(RequestedOutput("OUT", {"classification": 3})) == 3
    with pytest.raises(InvalidInput) as info:
        class_count(RequestedOutput("OUT", {"classification": 3, "shared_memory_region": "r"}))
    assert str(info.value) == "output 'OUT': Output can't set both 'shared_memory_region' and 'classification'"


# --- response ids and the answer a v2 call gets -------------------------------------------------------------
class _Labelled:
    labels = {"OUT": ["no", "yes"]}


def test_v2_answer_fills_the_id_and_classifies():
    request = InferRequest("m", [], request_outputs=[RequestedOutput("OUT", {"classification": 1})])
    response = InferResponse(None, "m", [InferOutput("OUT", [2], "FP32", data=np.array([0.2, 0.8], np.float32))])
    answer = v2_answer(request, response, _Labelled(), "generated-1")
    assert answer.id == "generated-1" and answer.outputs[0].as_numpy().tolist() == [b"0.800000:1:yes"]
    assert v2_answer(InferRequest("m", []), InferResponse("own", "m", []), None, "generated-2").id == "own"
    assert v2_answer(InferRequest("m", []), {"not": "v2"}, None, "x") == {"not": "v2"}


# --- CUDA shared memory ---------------------------------------------------------------------------------------
def test_cuda_shared_memory_without_a_gpu():
    assert cuda_shared_memory.status(True) == []
    cuda_shared_memory.unregister(True)
    cuda_shared_memory.unregister(True, "unknown")
    with pytest.raises(CudaRegionNotFound) as missing:
        cuda_shared_memory.status(True, "r")
    assert (missing.value.http_status, missing.value.grpc_code) == (404, "NOT_FOUND")
    assert str(missing.value).startswith("Unable to find cuda shared memory region: 'r'")
    with pytest.raises(CudaSharedMemoryUnsupported) as refused:
        cuda_shared_memory.register(True, "r")
    assert (refused.value.http_status, refused.value.grpc_code) == (400, "INVALID_ARGUMENT")
    assert str(refused.value).startswith("CUDA shared memory is not supported on this server: failed to register "
                                         "CUDA shared memory region: 'r', GPUs not supported")
    for call in (cuda_shared_memory.status, cuda_shared_memory.unregister):
        with pytest.raises(SharedMemoryForbidden):
            call(False)


# --- gRPC wire -------------------------------------------------------------------------------------------------
def test_every_answer_is_in_raw_output_contents():
    response = InferResponse("r", "m", [InferOutput("i", [2], "INT32", data=np.array([1, 2], np.int32)),
                                        InferOutput("s", [1], "BYTES", data=["é"])])
    msg = infer_response_to_grpc(response)
    assert list(msg.raw_output_contents) == [np.array([1, 2], "<i4").tobytes(), b"\x02\x00\x00\x00\xc3\xa9"]
    assert not any(output.HasField("contents") for output in msg.outputs)


def _request(*typed_names: str, raws: int = 0):
    message = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = message.inputs.add(name=name, datatype="INT32", shape=[1])
        if name in typed_names:
            tensor.contents.int_contents.append(1)
    message.raw_input_contents.extend([b"\x01\x00\x00\x00"] * raws)
    return message


@pytest.mark.parametrize("typed, raws", [(("INPUT0",), 2), (("INPUT0",), 1), (("INPUT0", "INPUT1"), 2)])
def test_typed_contents_beside_raw_ones_are_refused_in_tritons_words(typed, raws):
    with pytest.raises(InvalidInput) as info:
        infer_request_from_grpc(InferRequest, _request(*typed, raws=raws))
    assert str(info.value) == ("contents field must not be specified when using raw_input_contents for 'INPUT0' "
                               "for model 'simple': input 'INPUT0' has typed contents but the message also has raw "
                               "contents")


def test_the_empty_final_response_parameter():
    message = _request("INPUT0", "INPUT1")
    assert not wants_empty_final_response(message) and "triton_enable_empty_final_response" not in message.parameters
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    assert wants_empty_final_response(message)
    assert not wants_empty_final_response(Undecodable("ModelInferRequest", ValueError("bad bytes")))
    message.parameters["triton_enable_empty_final_response"].int64_param = 1
    with pytest.raises(InvalidInput) as info:
        infer_request_from_grpc(InferRequest, message)
    assert str(info.value) == ("invalid value type for 'triton_enable_empty_final_response' parameter, expected "
                               "bool_param (tritonclient's enable_empty_final_response=True)")


async def _answers(count: int, closed: list):
    try:
        for index in range(count):
            message = pb.ModelStreamInferResponse()
            message.infer_response.id = f"a{index}"
            yield message
    finally:
        closed.append(True)


def test_with_final_response_flags_every_answer_then_sends_an_empty_one():
    request = pb.ModelInferRequest(model_name="m", model_version="2", id="q")

    async def collect():
        return [m async for m in with_final_response(request, _answers(2, []))]

    got = asyncio.run(collect())
    flags = [(m.infer_response.id, m.infer_response.parameters["triton_final_response"].bool_param) for m in got]
    assert flags == [("a0", False), ("a1", False), ("q", True)]
    final = got[-1].infer_response
    assert (final.model_name, final.model_version, len(final.outputs), got[-1].error_message) == ("m", "2", 0, "")


def test_with_final_response_closes_the_answers_when_the_client_goes():
    closed: list = []

    async def first_only():
        stream = with_final_response(pb.ModelInferRequest(), _answers(5, closed))
        first = await anext(stream)
        await stream.aclose()
        return first.infer_response.id

    assert asyncio.run(first_only()) == "a0" and closed == [True]
