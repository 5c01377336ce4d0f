"""Models on Ray Serve behind one kserve_sdk server: RayModel over v1, v2 REST and gRPC, in parallel.

Run as a script, this file is the server: it starts a local Ray (2 CPUs, 127.0.0.1, no dashboard, no
Serve HTTP proxy), deploys the models below with fractional CPUs and serves them through RayModel.
"""
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

import kserve_sdk as kserve
from helpers import eventually, read_sse
from kserve_sdk import InferOutput, InferRequest, InferResponse
from kserve_sdk.errors import InvalidInput

pytestmark = pytest.mark.ray


class Scaler(kserve.Model):
    """Multiplies its input by ``factor``; ``sleep`` (v1 key or v2 parameter) makes predict take that long."""

    def __init__(self, name, factor, load_now=True):
        super().__init__(name)
        self.factor = factor
        if load_now:
            self.load()

    def predict(self, payload, headers=None):
        if isinstance(payload, InferRequest):
            time.sleep(float((payload.parameters or {}).get("sleep", 0)))
            x = payload.inputs[0].as_numpy()
            out = InferOutput("output-0", list(x.shape), "FP32")
            out.set_data_from_numpy((x * self.factor).astype(np.float32))
            return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=[out])
        started = time.time()
        time.sleep(float(payload.get("sleep", 0)))
        rows = payload["instances"]
        if rows == ["invalid"]:
            raise InvalidInput("instances must be numbers")
        if rows == ["notimpl"]:
            raise NotImplementedError("not for this input")
        if rows == ["boom"]:
            raise RuntimeError("boom")
        return {"predictions": (np.asarray(rows) * self.factor).tolist(), "pid": os.getpid(),
                "ran": [started, time.time()]}

    async def explain(self, payload, headers=None):
        return {"explanations": [f"x{self.factor}" for _ in payload["instances"]], "pid": os.getpid()}

    def get_input_types(self):
        return [{"name": "input-0", "datatype": "FP32", "shape": [-1, 2]}]

    def get_output_types(self):
        return [{"name": "output-0", "datatype": "FP32", "shape": [-1, 2]}]


class Tokens(kserve.Model):
    """Streams the words of its prompt, ``gap_ms`` after the first one."""

    def __init__(self, name):
        super().__init__(name)
        self.load()

    async def predict(self, payload, headers=None):
        words = payload["text_input"].split()
        for i, word in enumerate(words):
            yield {"text_output": word if i == 0 else " " + word, "pid": os.getpid()}
            await asyncio.sleep(payload.get("parameters", {}).get("gap_ms", 0) / 1000 if i == 0 else 0.01)


# name -> (class, constructor args, ray_actor_options)
DEPLOYMENTS = {
    "double": (Scaler, (2,), {"num_cpus": 0.5}),
    "triple": (Scaler, (3,), {"num_cpus": 0.5}),
    "tokens": (Tokens, (), {"num_cpus": 0.5}),
    "lazy": (Scaler, (5, False), {"num_cpus": 0.25}),  # runs, but its model never loads: not served
}


def main() -> None:
    import ray
    from ray import serve

    from kserve_sdk.ray import RayModel, shutdown

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2)
    try:
        serve.start(proxy_location="Disabled")
        apps = {name: serve.deployment(name=name, ray_actor_options=options)(cls).bind(name, *args)
                for name, (cls, args, options) in DEPLOYMENTS.items()}
        if hasattr(serve, "run_many"):  # deploy all at once, without waiting: RayModel.load() waits
            targets = [serve.RunTarget(app, name=name, route_prefix=None) for name, app in apps.items()]
            handles = dict(zip(apps, serve.run_many(targets, wait_for_applications_running=False), strict=True))
        else:
            handles = {name: serve.run(app, name=name, route_prefix=None) for name, app in apps.items()}
        models = [RayModel(name, handle) for name, handle in handles.items()]
        for model in models:
            model.load()
        kserve.ModelServer().start(models)
    finally:
        shutdown()


# --- the tests ---------------------------------------------------------------------------------------
def session_processes(sid: int):
    """(pid, command line) of every process in session ``sid``."""
    out = subprocess.run(["ps", "-e", "-ww", "-o", "pid=,sid=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    return [(int(r[0]), r[2] if len(r) > 2 else "") for r in rows if len(r) >= 2 and int(r[1]) == sid]


def kill_session(sid: int) -> None:
    for pid, _ in session_processes(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def server(start_server):
    srv = start_server("tests/test_ray.py", env={"RAY_USAGE_STATS_ENABLED": "0"}, wait=False)
    sid = srv.proc.pid  # the server leads its own session; Ray's processes (raylet, gcs_server, replicas) join it
    try:
        assert srv._wait_live(timeout=120), srv.log()
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.stop()
        kill_session(sid)


def predict(server, name, body, verb="predict"):
    response = httpx.post(f"{server.url}/v1/models/{name}:{verb}", json=body, timeout=30)
    return response.status_code, response.json()


def test_only_loaded_deployments_are_served(server):
    assert httpx.get(f"{server.url}/v2/health/ready").status_code == 200
    for name in ("double", "triple", "tokens"):
        assert httpx.get(f"{server.url}/v2/models/{name}/ready").status_code == 200
    assert httpx.get(f"{server.url}/v2/models/lazy/ready").status_code == 404
    assert "Ray deployment of model lazy runs but its model is not ready" in server.log()


def test_v1_predict_runs_in_the_replicas(server):
    status, double = predict(server, "double", {"instances": [[1, 2], [3, 4]]})
    assert status == 200 and double["predictions"] == [[2, 4], [6, 8]], double
    status, triple = predict(server, "triple", {"instances": [[1, 2]]})
    assert status == 200 and triple["predictions"] == [[3, 6]], triple
    assert len({server.proc.pid, double["pid"], triple["pid"]}) == 3


def test_v2_rest_infer_and_metadata(server):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = httpclient.InferInput("input-0", [2, 2], "FP32")
    x.set_data_from_numpy(np.array([[1, 2], [3, 4]], dtype=np.float32))  # binary: copied out of the body
    result = client.infer("double", [x], outputs=[httpclient.InferRequestedOutput("output-0")])
    np.testing.assert_array_equal(result.as_numpy("output-0"), [[2, 4], [6, 8]])
    metadata = client.get_model_metadata("triple")
    assert metadata["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 2]}]
    assert metadata["outputs"][0]["name"] == "output-0"


def test_grpc_infer_and_metadata(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("input-0", [1, 2], "FP32")
    x.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
    np.testing.assert_array_equal(client.infer("triple", [x]).as_numpy("output-0"), [[3, 6]])
    assert client.get_model_metadata("double").inputs[0].name == "input-0"
    bad = grpcclient.InferInput("input-0", [1], "BYTES")
    bad.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    with pytest.raises(Exception) as err:  # the streaming model refuses unary calls in its replica
        client.infer("tokens", [bad])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT", err.value


def test_two_models_answer_in_parallel(server):
    for name in ("double", "triple"):
        predict(server, name, {"instances": [[0, 0]]})
    results = {}

    def call(name):
        results[name] = predict(server, name, {"instances": [[1, 1]], "sleep": 1.0})

    threads = [threading.Thread(target=call, args=(name,)) for name in ("double", "triple")]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    (status2, double), (status3, triple) = results["double"], results["triple"]
    assert (status2, double["predictions"], status3, triple["predictions"]) == (200, [[2, 2]], 200, [[3, 3]])
    # the two predicts ran at the same time in their replicas, and together took well under 2 s
    overlap = min(double["ran"][1], triple["ran"][1]) - max(double["ran"][0], triple["ran"][0])
    assert overlap > 0.5, (overlap, elapsed)
    assert elapsed < 1.95, f"two 1 s requests took {elapsed:.2f} s"  # one after the other: 2 s or more


def test_explain_runs_explain(server):
    status, body = predict(server, "triple", {"instances": [[1, 2], [3, 4]]}, verb="explain")
    assert status == 200 and body["explanations"] == ["x3", "x3"], body


@pytest.mark.parametrize("rows,status,message", [
    (["invalid"], 400, "instances must be numbers"),
    (["notimpl"], 501, "not for this input"),
    (["boom"], 500, "RuntimeError : boom (model 'double')"),
])
def test_replica_errors_keep_their_status(server, rows, status, message):
    assert predict(server, "double", {"instances": rows}) == (status, {"error": message})


def test_streaming_through_ray(server):
    body = {"text_input": "one two three four", "parameters": {"gap_ms": 700}}
    _, events = read_sse(server.url, "/v2/models/tokens/generate_stream", body)
    assert "".join(data["text_output"] for _, data in events) == "one two three four"
    assert {data["model_name"] for _, data in events} == {"tokens"}
    assert events[0][1]["pid"] != server.proc.pid
    assert events[1][0] - events[0][0] >= 0.4, "the first token was not sent before the replica's pause"
    lines = httpx.post(f"{server.url}/v1/models/tokens:predict", json={"text_input": "a b"}, timeout=30)
    assert [json.loads(line)["text_output"] for line in lines.text.splitlines()] == ["a", " b"]


def none_left(sid: int) -> bool:
    left = session_processes(sid)
    assert left == [], left
    return True


def test_stop_leaves_no_ray_process(server):
    sid = server.proc.pid
    names = " ".join(args for _, args in session_processes(sid))
    assert "raylet" in names and "gcs_server" in names, names
    os.kill(server.proc.pid, signal.SIGTERM)  # the server alone: it drains, then shuts Serve and Ray down
    assert server.wait_exit(timeout=60) == 0, server.log()[-3000:]
    try:
        eventually(lambda: none_left(sid), timeout=10, interval=0.2)
    finally:
        kill_session(sid)


def test_sample_serves_as_its_readme_shows_and_stops_with_its_process_group(start_server):
    """samples/parallel_ray (its README's requests), stopped as honcho stops it: SIGTERM to the whole group."""
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples", "parallel_ray")
    sample = start_server("samples/parallel_ray/model_remote.py", env={"RAY_USAGE_STATS_ENABLED": "0"},
                          grpc=False, wait=False)
    sid = sample.proc.pid
    try:
        assert sample._wait_live(timeout=120), sample.log()
        for name, path in (("input.json", "/v1/models/primes:predict"), ("input-v2.json", "/v2/models/collatz/infer")):
            with open(os.path.join(folder, name)) as f:
                body = f.read()
            with open(os.path.join(folder, name.replace("input", "output"))) as f:
                expected = json.load(f)
            response = httpx.post(sample.url + path, content=body, timeout=60)
            assert (response.status_code, response.json()) == (200, expected)
        os.killpg(sid, signal.SIGTERM)  # Ray's raylet and gcs_server get it too: shutdown() copes
        assert sample.wait_exit(timeout=60) == 0, sample.log()[-3000:]
        eventually(lambda: none_left(sid), timeout=15, interval=0.2)
    finally:
        if sample.proc.poll() is None:
            sample.stop()
        kill_session(sid)


if __name__ == "__main__":
    sys.exit(main())
