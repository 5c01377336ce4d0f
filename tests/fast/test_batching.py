"""batching.py: requests merged along the first dimension, results cut back per request, the Batcher grouping
concurrent calls by what can be merged, and a failure confined to the requests of its own batch."""
import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from kserve_sdk.batching import Batcher, merge_requests, split_result
from kserve_sdk.errors import InferenceError
from kserve_sdk.lifecycle import Timings
from kserve_sdk.protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse, RequestedOutput


def request(rows, request_id=None, name="x", datatype="FP32", width=2, first=0.0):
    values = (np.arange(rows * width) + first).reshape(rows, width).astype(np.float32 if datatype == "FP32" else
                                                                         np.int64)
    return InferRequest("m", [InferInput(name, [rows, width], datatype, values.tolist())], request_id=request_id)


def pending(req):
    """What split_result reads of a queued call: its request and its rows."""
    return SimpleNamespace(request=req, rows=req.inputs[0].shape[0])


def test_requests_are_stacked_along_the_first_dimension():
    first = request(1, "a", first=0)
    first.parameters, first.request_outputs = {"p": 1}, [RequestedOutput("y")]
    merged = merge_requests([first, request(2, "b", first=10)])
    tensor = merged.inputs[0]
    assert tensor.shape == [3, 2] and tensor.datatype == "FP32"
    assert tensor.as_numpy().tolist() == [[0, 1], [10, 11], [12, 13]]
    assert (merged.id, merged.parameters, merged.request_outputs) == ("a", {"p": 1}, [RequestedOutput("y")])


def test_merging_keeps_raw_answers_for_raw_requests():
    raw = InferRequest("m", [InferInput("x", [1], "INT8")], raw_inputs=[b"\x01"], from_grpc=True)
    merged = merge_requests([raw, InferRequest("m", [InferInput("x", [1], "INT8", [2])])])
    assert merged.use_binary_outputs and merged.inputs[0].as_numpy().tolist() == [1, 2]


def test_a_batch_response_is_cut_back_per_request():
    batch = [pending(request(1, "a")), pending(request(2, "b"))]
    result = InferResponse("batch", "m", [InferOutput("y", [3], "INT64", np.array([7, 8, 9])),
                                          InferOutput("z", [3, 2], "FP32", np.zeros((3, 2), dtype=np.float32))],
                           model_version="1", parameters={"k": 1})
    first, second = split_result(result, batch, "m")
    assert (first.id, second.id) == ("a", "b") and first.model_version == "1" and second.parameters == {"k": 1}
    assert first.outputs[0].as_numpy().tolist() == [7] and second.outputs[0].as_numpy().tolist() == [8, 9]
    assert second.outputs[1].shape == [2, 2] and first.outputs[1].shape == [1, 2]


def test_a_batch_array_or_list_is_cut_back_per_request():
    batch = [pending(request(2)), pending(request(1))]
    pieces = split_result(np.arange(6).reshape(3, 2), batch, "m")
    assert [p.tolist() for p in pieces] == [[[0, 1], [2, 3]], [[4, 5]]]
    assert [p.tolist() for p in split_result([1, 2, 3], batch, "m")] == [[1, 2], [3]]


@pytest.mark.parametrize("result,message", [
    (np.arange(4), "model 'm' returned an array with first dimension 4 for a batch of 3 rows"),
    (np.float32(1), "returned float32; a batched predict must return an InferResponse or an array"),
    (np.array(5), "returned an array with first dimension none for a batch of 3 rows"),
    ({"predictions": [1, 2, 3]}, "returned dict; a batched predict must return"),
    (InferResponse("r", "m", [InferOutput("y", [2], "INT64", np.array([1, 2]))]),
     "returned output 'y' with first dimension 2 for a batch of 3 rows"),
])
def test_a_batch_result_that_does_not_fit_the_batch_is_the_models_error(result, message):
    with pytest.raises(InferenceError, match=message):
        split_result(result, [pending(request(1)), pending(request(2))], "m")


def run_batched(calls, predict, max_batch_size=8, max_latency_ms=20):
    """Submit ``calls`` (requests) to one Batcher at once; each result or exception, in order."""
    async def scenario():
        batcher = Batcher("m", predict, max_batch_size, max_latency_ms)
        return await asyncio.gather(*(batcher.submit(r, {}, Timings()) for r in calls), return_exceptions=True)

    return asyncio.run(asyncio.wait_for(scenario(), 10))


def test_concurrent_calls_share_one_predict():
    seen = []

    async def predict(req, headers, timings):
        seen.append(req.inputs[0].shape[0])
        return req.inputs[0].as_numpy() * 2

    results = run_batched([request(1, first=0), request(2, first=10)], predict)
    assert seen == [3]
    assert [r.tolist() for r in results] == [[[0, 2]], [[20, 22], [24, 26]]]


def test_calls_that_cannot_merge_run_apart_and_a_failure_stays_in_its_batch():
    async def predict(req, headers, timings):
        if req.inputs[0].name == "bad":
            raise ValueError("this batch broke")
        return req.inputs[0].as_numpy()

    calls = [request(1, name="x"), request(1, name="bad"), request(1, name="x", first=5), request(1, name="bad")]
    results = run_batched(calls, predict)
    assert results[0].tolist() == [[0, 1]] and results[2].tolist() == [[5, 6]]
    assert all(isinstance(r, ValueError) and str(r) == "this batch broke" for r in (results[1], results[3]))


def test_a_full_batch_runs_at_once_and_a_big_call_alone():
    sizes = []

    async def predict(req, headers, timings):
        sizes.append(req.inputs[0].shape[0])
        return req.inputs[0].as_numpy()

    run_batched([request(2), request(2)], predict, max_batch_size=4, max_latency_ms=60_000)  # no wait for the timer
    run_batched([request(5)], predict, max_batch_size=4)
    assert sizes == [4, 5]


def test_bytes_and_scalar_inputs_are_never_batched():
    sizes = []

    async def predict(req, headers, timings):
        sizes.append(req.inputs[0].shape)
        return "ok"

    text = InferRequest("m", [InferInput("s", [1], "BYTES", ["a"])])
    scalar = InferRequest("m", [InferInput("x", [], "FP32", [1.0])])
    assert run_batched([text, text, scalar], predict) == ["ok", "ok", "ok"]
    assert sizes == [[1], [1], []]


def test_each_call_is_counted_and_the_batch_execution_once():
    async def predict(req, headers, timings):
        return req.inputs[0].as_numpy()

    async def scenario():
        batcher = Batcher("m", predict, 8, 10)
        timings = [Timings(), Timings()]
        await asyncio.gather(*(batcher.submit(request(1), {}, t) for t in timings))
        return timings

    first, second = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert (first.executions, second.executions) == (1, 0)
    assert first.queue_s > 0 and second.queue_s > 0  # both waited for the batch
