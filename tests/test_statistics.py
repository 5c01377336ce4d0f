"""Triton's statistics extension: per-model counts and times, over REST and gRPC, summed over workers."""
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from helpers import post_json, read_sse, request, side_by_side


def _infer_both_ways(server, rest_calls: int, grpc_calls: int) -> None:
    data = np.ones((1, 4), dtype=np.float32)
    clients = [(thttp, thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}"), rest_calls),
               (tgrpc, tgrpc.InferenceServerClient(server.grpc_url), grpc_calls)]
    for module, client, calls in clients:
        for _ in range(calls):
            tensor = module.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(data)
            client.infer("echo", [tensor])


def _stats(server, model: str) -> dict:
    status, _, body = request(server.http_port, "GET", f"/v2/models/{model}/stats")
    assert status == 200, body
    return json.loads(body)["model_stats"][0]


def test_counts_and_times_over_rest_and_grpc(start_server):
    server = start_server("tests/models/zoo.py", env={"ZOO_MODELS": "echo,failing"})
    _infer_both_ways(server, 5, 4)
    for instance in ("boom", "invalid", 3):
        post_json(server.http_port, "/v1/models/failing:predict", {"instances": [instance]})

    echo = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}").get_inference_statistics("echo")
    (stats,) = echo["model_stats"]
    assert (stats["name"], stats["inference_count"], stats["execution_count"]) == ("echo", 9, 9)
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 9 and inference["fail"]["count"] == 0
    assert inference["compute_infer"]["count"] == 9 and inference["compute_input"]["count"] == 9
    assert 0 < inference["compute_infer"]["ns"] <= inference["success"]["ns"]
    assert stats["last_inference"] > 1_700_000_000_000  # ms since the epoch

    failing = _stats(server, "failing")
    assert (failing["inference_count"], failing["inference_stats"]["fail"]["count"]) == (1, 2)

    over_grpc = tgrpc.InferenceServerClient(server.grpc_url).get_inference_statistics("echo", as_json=True)
    assert over_grpc["model_stats"][0]["inference_count"] == "9"  # protobuf's JSON writes uint64 as text
    every = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}").get_inference_statistics()
    assert [s["name"] for s in every["model_stats"]] == ["echo", "failing"]
    assert "statistics" in json.loads(request(server.http_port, "GET", "/v2")[2])["extensions"]


def test_unknown_model_is_not_found(zoo):
    status, _, body = request(zoo.http_port, "GET", "/v2/models/nope/stats")
    assert (status, json.loads(body)) == (404, {"error": "Request for unknown model: 'nope' is not found. "
                                                         "Model with name nope does not exist. Models served: "
                                                         "echo, explained, failing, headers, pipeline, raw, slow."})
    with pytest.raises(InferenceServerException) as caught:
        tgrpc.InferenceServerClient(zoo.grpc_url).get_inference_statistics("nope")
    assert "NOT_FOUND" in str(caught.value.status()) \
        and "Model with name nope does not exist." in caught.value.message()


def test_summed_over_workers_and_batches_counted_as_executions(start_server):
    server = start_server("tests/models/scale.py", "--workers", "2", env={"SCALE_MODELS": "cpu,batcher"}, grpc=False)
    answers = side_by_side(lambda: post_json(server.http_port, "/v1/models/cpu:predict", {"instances": [50_000]}),
                           lambda answers: len({body["pid"] for _, _, body in answers}) == 2)
    assert {status for status, _, _ in answers} == {200}
    assert len({body["pid"] for _, _, body in answers}) == 2
    assert {_stats(server, "cpu")["inference_count"] for _ in range(10)} == {len(answers)}  # each sums both

    doc = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: post_json(server.http_port, "/v2/models/batcher/infer", doc), range(16)))
    assert {status for status, _, _ in answers} == {200}
    batches = sum(1 for _, _, body in answers for o in body["outputs"]
                  if o["name"] == "batch_rows" and o["data"][0] > 1)
    stats = _stats(server, "batcher")
    assert stats["inference_count"] == 16
    assert stats["execution_count"] < 16 and batches > 0  # merged requests ran as one predict call


def _waits(stats: dict):
    """(queue ns, compute_infer ns, success ns) of one model's statistics."""
    inference = stats["inference_stats"]
    return inference["queue"]["ns"], inference["compute_infer"]["ns"], inference["success"]["ns"]


def test_wait_for_a_model_thread_is_queue_time_not_compute(start_server):
    # One model thread, four concurrent calls of a sync predict that sleeps 0.2 s: they wait 0.2, 0.4 and
    # 0.6 s for the thread, and compute 0.8 s in all.
    server = start_server("tests/models/zoo.py", "--max_asyncio_workers", "1", env={"ZOO_MODELS": "slow"},
                          grpc=False)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: post_json(server.http_port, "/v1/models/slow:predict",
                                                    {"instances": [i]}), range(4)))
    assert [status for status, _, _ in answers] == [200] * 4
    stats = _stats(server, "slow")
    queue_ns, infer_ns, success_ns = _waits(stats)
    assert stats["inference_stats"]["queue"]["count"] == 4
    assert queue_ns >= 0.9e9, stats
    assert infer_ns >= 0.75e9 and queue_ns + infer_ns <= success_ns, stats


def test_wait_for_a_batch_is_queue_time_not_compute(start_server):
    # A lone request waits max_latency_ms (50) for others to join its batch, then predict sleeps 20 ms.
    server = start_server("tests/models/scale.py", env={"SCALE_MODELS": "batcher"})
    tensor = tgrpc.InferInput("x", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
    result = tgrpc.InferenceServerClient(server.grpc_url).infer("batcher", [tensor])
    assert result.as_numpy("doubled").tolist() == [[2.0, 2.0]]
    queue_ns, infer_ns, success_ns = _waits(_stats(server, "batcher"))
    assert queue_ns >= 40e6 and infer_ns >= 15e6 and queue_ns + infer_ns <= success_ns, (queue_ns, infer_ns)


def _count_with_batched_steps(server, streams: int, steps: int) -> None:
    """``streams`` concurrent SSE streams of the counter model, each answering ``steps`` numbers."""
    def count(start: int) -> list:
        body = {"text_input": str(start), "parameters": {"steps": steps}}
        _, events = read_sse(server.url, "/v2/models/counter/generate_stream", body)
        return [int(event["text_output"]) for _, event in events]

    with ThreadPoolExecutor(streams) as pool:
        answers = list(pool.map(count, range(0, 1000 * streams, 1000)))
    assert answers == [list(range(start + 1, start + steps + 1)) for start in range(0, 1000 * streams, 1000)]


def test_batched_steps_are_executions_with_their_batch_size(start_server):
    # tests/models/batch_steps.py: every answer of a stream is a row of a @kserve_sdk.batch step of at most
    # 8 rows taking 10 ms; 12 streams of 20 steps over two workers, each worker batching its own streams.
    server = start_server("tests/models/batch_steps.py", "--workers", "2")
    _count_with_batched_steps(server, streams=12, steps=20)

    stats = _stats(server, "counter")
    sizes = {entry["batch_size"]: entry["compute_infer"] for entry in stats["batch_stats"]}
    assert max(sizes) > 1 and max(sizes) <= 8, sizes
    assert sum(size * infer["count"] for size, infer in sizes.items()) == 12 * 20  # every row of both workers
    steps = sum(infer["count"] for infer in sizes.values())
    assert all(infer["ns"] >= infer["count"] * 9e6 for infer in sizes.values()), sizes
    assert stats["inference_count"] == 12 and steps < 12 * 20
    assert stats["execution_count"] == 12 + steps  # each stream's own run of predict, and each step
    assert all(entry["compute_input"] == entry["compute_output"] == {"count": 0, "ns": 0}
               for entry in stats["batch_stats"])

    over_grpc = tgrpc.InferenceServerClient(server.grpc_url).get_inference_statistics("counter")
    (grpc_stats,) = over_grpc.model_stats
    assert grpc_stats.execution_count == stats["execution_count"]
    assert {entry.batch_size: (entry.compute_infer.count, entry.compute_infer.ns)
            for entry in grpc_stats.batch_stats} == {size: (infer["count"], infer["ns"])
                                                     for size, infer in sizes.items()}
    as_json = tgrpc.InferenceServerClient(server.grpc_url).get_inference_statistics("counter", as_json=True)
    assert [int(entry["batch_size"]) for entry in as_json["model_stats"][0]["batch_stats"]] == sorted(sizes)
    over_http = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}").get_inference_statistics("counter")
    assert over_http["model_stats"][0]["batch_stats"] == stats["batch_stats"]


def test_a_model_that_never_batched_has_no_batch_stats(zoo):
    post_json(zoo.http_port, "/v1/models/echo:predict", {"instances": [1]})
    assert _stats(zoo, "echo")["batch_stats"] == []
