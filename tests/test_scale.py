"""Scale on one machine: adaptive batching, the model repository, and multi-process workers."""
import asyncio
import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from helpers import eventually, post_json, side_by_side


@pytest.fixture(scope="module")
def scale(start_server):
    return start_server("tests/models/scale.py")


async def _infer_json(port, doc):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(doc).encode()
    writer.write(b"POST /v2/models/batcher/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(payload)


def _rows(values, width=8):
    return {"inputs": [{"name": "x", "shape": [1, width], "datatype": "FP32", "data": values}]}


def test_concurrent_requests_are_batched_and_split_back(scale):
    async def main():
        docs = [_rows([float(i * 10 + j) for j in range(8)]) for i in range(32)]
        docs.append(_rows([1.0, 2.0, 3.0, 4.0], width=4))  # another shape: its own batch
        return await asyncio.gather(*[_infer_json(scale.http_port, d) for d in docs])

    results = asyncio.run(main())
    batch_sizes = []
    for i, (status, body) in enumerate(results[:32]):
        assert status == 200, body
        outputs = {o["name"]: o["data"] for o in body["outputs"]}
        assert outputs["doubled"] == [2.0 * (i * 10 + j) for j in range(8)]  # exactly its own row
        batch_sizes.append(outputs["batch_rows"][0])
    assert max(batch_sizes) > 8, batch_sizes
    status, body = results[32]
    assert status == 200 and {o["name"]: o["data"] for o in body["outputs"]}["doubled"] == [2.0, 4.0, 6.0, 8.0]


def test_rest_and_grpc_share_batches(scale):
    results = {}

    def grpc_calls():
        client = tgrpc.InferenceServerClient(scale.grpc_url)
        got = []
        done = threading.Event()
        for i in range(8):
            tensor = tgrpc.InferInput("x", [1, 8], "FP32")
            tensor.set_data_from_numpy(np.full((1, 8), 100.0 + i, np.float32))
            client.async_infer("batcher", [tensor], callback=lambda result, error: (
                got.append((result, error)), len(got) == 8 and done.set()))
        done.wait(20)
        results["grpc"] = got
        client.close()

    thread = threading.Thread(target=grpc_calls)
    thread.start()
    async def rest_calls():
        return await asyncio.gather(*[_infer_json(scale.http_port, _rows([float(i)] * 8)) for i in range(8)])

    rest = asyncio.run(asyncio.wait_for(rest_calls(), 20))
    thread.join(30)
    for i, (status, body) in enumerate(rest):
        assert status == 200 and body["outputs"][0]["data"] == [2.0 * i] * 8
    values = sorted(float(r.as_numpy("doubled")[0, 0]) for r, e in results["grpc"] if e is None)
    assert values == [2.0 * (100 + i) for i in range(8)]


def test_an_error_fails_only_its_batch(scale):
    async def main():
        bad = _infer_json(scale.http_port, _rows([-1.0] * 8))
        good = [_infer_json(scale.http_port, _rows([float(i)] * 4, width=4)) for i in range(4)]
        return await asyncio.gather(bad, *good)

    results = asyncio.run(main())
    assert results[0][0] == 500 and "negative values are not allowed" in results[0][1]["error"]
    for i, (status, body) in enumerate(results[1:]):
        assert status == 200 and body["outputs"][0]["data"] == [2.0 * i] * 4


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_repository_index_load_unload(scale, protocol):
    client = (thttp.InferenceServerClient(f"127.0.0.1:{scale.http_port}") if protocol == "http"
              else tgrpc.InferenceServerClient(scale.grpc_url))
    name = f"good-{protocol}"

    def index():
        entries = client.get_model_repository_index()
        if protocol == "grpc":
            entries = [{"name": m.name, "state": m.state, "reason": m.reason} for m in entries.models]
        return {e["name"]: e for e in entries}

    assert index()["batcher"]["state"] == "READY"
    client.load_model(name)
    assert client.is_model_ready(name) and index()[name]["state"] == "READY"
    with pytest.raises(InferenceServerException) as err:
        client.load_model("broken")
    assert "failed to load model 'broken': RuntimeError: weights are corrupt" in err.value.message()
    broken = index()["broken"]
    assert broken["state"] == "UNAVAILABLE" and "weights are corrupt" in broken["reason"]
    with pytest.raises(InferenceServerException) as err:
        client.load_model("not-in-repo")
    assert "Model with name not-in-repo does not exist." in err.value.message()
    assert client.is_model_ready("batcher")  # the others are unaffected
    client.unload_model(name)
    assert (index()[name]["state"], index()[name]["reason"]) == ("UNAVAILABLE", "unloaded")  # listed, as Triton does
    assert client.is_model_ready(name) is False
    client.close()


def test_unload_waits_for_calls_in_flight(scale):
    client = thttp.InferenceServerClient(f"127.0.0.1:{scale.http_port}")
    client.load_model("good-inflight")
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        r=post_json(scale.http_port, "/v1/models/good-inflight:predict", {"instances": [1.0]})))
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    client.unload_model("good-inflight")
    waited = time.monotonic() - started
    thread.join(10)
    assert result["r"][0] == 200 and "predictions" in result["r"][2]
    assert waited >= 0.5  # unload waited for the 1 s call to finish
    assert not client.is_model_ready("good-inflight")
    client.close()


def _worker_pids(server):
    children = open(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read().split()
    return {int(pid) for pid in children}


def _cpu_calls(port: int, calls: int, concurrency: int, work: int = 400000) -> None:
    """``calls`` CPU-bound v1 predicts of ``work`` iterations each, ``concurrency`` at a time, each on a
    connection of its own (so the kernel hands each to a worker anew)."""
    async def main():
        left = [work] * calls

        async def client():
            while left:
                body = b'{"instances": [%d]}' % left.pop()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"POST /v1/models/cpu:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                answer = await reader.read()
                assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
                writer.close()

        await asyncio.wait_for(asyncio.gather(*[client() for _ in range(concurrency)]), 120)

    asyncio.run(main())


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_shares(pids, port: int) -> dict:
    """Each worker's share of the CPU time the workers spent on one round of concurrent CPU-bound calls."""
    before = {pid: _cpu_seconds(pid) for pid in pids}
    _cpu_calls(port, 16, 4)
    used = {pid: _cpu_seconds(pid) - before[pid] for pid in pids}
    return {pid: round(used[pid] / sum(used.values()), 2) for pid in pids}


def test_two_workers_share_cpu_bound_work(start_server):
    """With --workers 2, concurrent CPU-bound requests are worked on by both processes, which is what lets a
    second core help. Measured as CPU time (from /proc) each worker spends on one round of calls, against what
    both spent on that round: a busy machine slows both alike, and a round that one worker took alone (the
    kernel may hand it a few connections in a row) is one more round, for 60 s at most. The speed-up itself is
    a benchmark's to measure: wall-clock throughput on a shared machine is not a test's."""
    two = start_server("tests/models/scale.py", "--workers", "2", env={"SCALE_MODELS": "cpu"}, grpc=False)
    pids = eventually(lambda: len(_worker_pids(two)) == 2 and _worker_pids(two), 30, message=two.log)

    def pid_of_a_call():
        return post_json(two.http_port, "/v1/models/cpu:predict", {"instances": [1000]})[2]["pid"]

    answered = set(side_by_side(pid_of_a_call, lambda got: set(got) >= pids))  # both workers serve by now
    assert answered == pids, (answered, pids)
    rounds = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rounds.append(_cpu_shares(pids, two.http_port))
        if min(rounds[-1].values()) >= 0.25:
            return
    raise AssertionError(f"no round of concurrent calls was shared by both workers: shares by round {rounds}")


def test_grpc_answers_in_every_worker_and_dead_workers_are_replaced(start_server):
    server = start_server("tests/models/scale.py", "--workers", "2", env={"SCALE_MODELS": "sleepy"})
    deadline = time.monotonic() + 10
    while len(_worker_pids(server)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = _worker_pids(server)
    seen = set()
    # A new channel (connection) each time: the workers' gRPC ports are SO_REUSEPORT, so the kernel spreads
    # connections over the workers that have bound theirs. A worker that is still starting has not, so ask
    # until both answered, for 30 s at most (a count would run out before a slow worker binds).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        client = tgrpc.InferenceServerClient(server.grpc_url)
        tensor = tgrpc.InferInput("x", [1], "FP32")
        tensor.set_data_from_numpy(np.array([0.0], np.float32))
        seen.add(int(client.infer("sleepy", [tensor]).as_numpy("pid")[0]))
        client.close()
        if seen == pids:
            break
    assert seen == pids
    victim = sorted(pids)[0]
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    failures, answered_by = 0, set()
    while time.monotonic() - killed_at < 5:
        status, _, body = post_json(server.http_port, "/v1/models/sleepy:predict", {"instances": [0]})
        if status != 200:
            failures += 1
        else:
            answered_by.add(body["predictions"][0])
        now = _worker_pids(server)
        if len(now) == 2 and victim not in now:
            break
    replaced = _worker_pids(server)
    assert victim not in replaced and len(replaced) == 2, replaced
    assert time.monotonic() - killed_at < 5
    assert failures == 0 and victim not in answered_by
    assert f"worker {victim} exited (killed by signal 9); starting a new one" in server.log()


def test_load_and_unload_reach_every_worker(start_server):
    server = start_server("tests/models/scale.py", "--workers", "2", env={"SCALE_MODELS": "sleepy"})
    client = thttp.InferenceServerClient(f"127.0.0.1:{server.http_port}")

    def answer():
        status, _, body = post_json(server.http_port, "/v1/models/good-everywhere:predict", {"instances": [0]})
        return status, body["predictions"][0] if status == 200 else body["error"]

    def answers(until_pids=None):  # 32 at least, side by side, so both workers are asked
        return set(side_by_side(answer, lambda got: len(got) >= 32 and (
            until_pids is None or {pid for _, pid in got} >= until_pids)))

    client.load_model("good-everywhere")
    answered = answers(until_pids=_worker_pids(server))
    assert {status for status, _ in answered} == {200}
    assert {pid for _, pid in answered} == _worker_pids(server)  # both workers have the model
    victim = sorted(_worker_pids(server))[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while (victim in _worker_pids(server) or len(_worker_pids(server)) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the new worker replays the repository changes before it serves
    assert {status for status, _ in answers()} == {200}  # the replacement replayed the load
    client.unload_model("good-everywhere")
    assert answers() == {(404, "Request for unknown model: 'good-everywhere' has no available versions. Model "
                               "good-everywhere was unloaded: load it again (POST /v2/repository/models/"
                               "good-everywhere/load) to serve it.")}
    client.close()
