"""A model repository served lazily (``--model_control_mode lazy``) within a memory budget, on real servers
started as ``python -m kserve_sdk --model_repository DIR``: a model loads on its first request and the least
recently used idle one is evicted to make room (the index and the metrics show it); a model with a call in
flight, or pinned, is never evicted, and when nothing can go the request is answered 503 with the reason;
concurrent first requests cause one load; a failing load answers 503 with its reason and loads once fixed,
after its backoff; sizes count against ``--max_model_memory_mb``; every worker loads on its own."""
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

import numpy as np
import pytest
import tritonclient.grpc as tgrpc

from helpers import (
    Server,
    eventually,
    post_json,
    repository_server,
    request,
    scrape,
    side_by_side,
    triton_error,
    triton_input,
    value,
)

MODELS = "tests.models.repository_models"


@pytest.fixture
def serve():
    """A factory: ``serve(repository, *flags)`` runs ``python -m kserve_sdk --model_repository repository
    flags...``; every server is stopped at the end."""
    started: List[Server] = []

    def start(repository: str, *flags: str, env: Dict[str, str] = None) -> Server:
        server = repository_server(repository, *flags, env=env)
        started.append(server)
        server.start()
        eventually(lambda: request(server.http_port, "GET", "/v2/health/ready")[0] == 200, 30,
                   message=server.log)
        return server

    yield start
    for server in started:
        server.stop()
        os.unlink(server.log_file.name)


def add_model(root, name: str, implementation: str, **extra: Any) -> None:
    """A model folder ``root/name`` served by ``implementation`` with ``extra`` as its parameters.extra."""
    folder = root / name
    folder.mkdir()
    settings = {"name": name, "implementation": f"{MODELS}:{implementation}", "parameters": {"extra": extra}}
    (folder / "model-settings.json").write_text(json.dumps(settings))


def events(path) -> List[List[str]]:
    """The lines of an events file, split: ``[event, name, version, pid]``."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def predict(server: Server, model: str, request_id: str = "x"):
    """(status, headers, body) of a v1 predict."""
    return post_json(server.http_port, f"/v1/models/{model}:predict", {"instances": [1], "id": request_id})


def index(server: Server) -> Dict[str, Dict[str, str]]:
    """name -> its index entry (the repository's models here have no versions)."""
    status, _, entries = post_json(server.http_port, "/v2/repository/index", {})
    assert status == 200, entries
    return {entry["name"]: entry for entry in entries}


def states(server: Server) -> Dict[str, str]:
    return {name: entry.get("state", "") for name, entry in index(server).items()}


@pytest.fixture
def five(tmp_path):
    """Five Echo models a..e sharing one events file, and a Blocker."""
    root, log = tmp_path / "repo", tmp_path / "events.txt"
    root.mkdir()
    for name in "abcde":
        add_model(root, name, "Echo", events=str(log))
    add_model(root, "blocker", "Blocker", events=str(log), started=str(tmp_path / "started"),
              release=str(tmp_path / "release"))
    add_model(root, "blocker2", "Blocker", events=str(log), started=str(tmp_path / "started2"),
              release=str(tmp_path / "release"))
    return root, log


def test_requests_in_turn_load_and_evict_the_least_recently_used(serve, five):
    root, log = five
    server = serve(str(root), "--model_control_mode", "lazy", "--max_loaded_models", "2")
    assert states(server) == {name: "" for name in ["a", "b", "c", "d", "e", "blocker", "blocker2"]}  # none loaded
    assert set(index(server)["a"]) == {"name"}  # as Triton lists a model it has not loaded
    for name in "ab":
        status, _, body = predict(server, name)
        assert status == 200 and body["predictions"][0] == name, body
    assert states(server)["a"] == states(server)["b"] == "READY"
    assert predict(server, "a")[0] == 200  # a is now the more recently used
    assert predict(server, "c")[0] == 200  # room for c: b goes, not a
    entries = index(server)
    assert entries["b"] == {"name": "b", "state": "UNAVAILABLE", "reason": "evicted to make room"}
    assert entries["a"]["state"] == entries["c"]["state"] == "READY"
    samples = scrape(server)
    assert value(samples, "kserve_repository_loaded_models") == 2
    assert value(samples, "kserve_repository_evictions_total") == 1
    assert value(samples, "kserve_repository_loads_total", outcome="loaded") == 3
    assert value(samples, "kserve_repository_load_seconds_count") == 3
    # an evicted model loads again on its next request
    status, _, body = predict(server, "b")
    assert status == 200 and body["predictions"][0] == "b"
    assert [event[:2] for event in events(log)] == [
        ["load", "a"], ["load", "b"], ["stop", "b"], ["load", "c"], ["stop", "a"], ["load", "b"]]
    assert value(scrape(server), "kserve_repository_evictions_total") == 2
    assert "model 'a' evicted to make room for model 'b'" in server.log()


def test_a_model_with_a_call_in_flight_is_never_evicted(serve, five, tmp_path):
    root, log = five
    server = serve(str(root), "--model_control_mode", "lazy", "--max_loaded_models", "2")
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(predict, server, "blocker", "held")
        eventually(lambda: (tmp_path / "started.held").exists(), 20, message=server.log)
        for name in "abc":  # each load needs room: the idle one goes, never the blocker
            status, _, body = predict(server, name)
            assert status == 200 and body["predictions"][0] == name, body
        assert states(server)["blocker"] == "READY"
        assert [event[1] for event in events(log) if event[0] == "stop"] == ["a", "b"]
        # both slots busy: no room, said with the reason, and nothing loaded past the budget
        second = pool.submit(predict, server, "blocker2", "held2")
        eventually(lambda: (tmp_path / "started2.held2").exists(), 20, message=server.log)
        status, headers, body = predict(server, "d")
        assert status == 503, body
        assert headers["retry-after"] == "1"
        assert body["error"] == ("no room for model 'd': 2 loaded models busy or pinned (--max_loaded_models 2); "
                                 "retry later")
        assert value(scrape(server), "kserve_repository_loads_total", outcome="no_room") == 1
        assert states(server)["d"] == ""  # never loaded
        (tmp_path / "release").write_text("go")
        assert held.result(timeout=30)[2] == {"predictions": ["blocker", "released"]}
        assert second.result(timeout=30)[0] == 200
    assert predict(server, "d")[0] == 200  # the calls have ended: room again


def test_twenty_concurrent_first_requests_cause_one_load(serve, five):
    root, log = five
    server = serve(str(root), "--model_control_mode", "lazy")
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: predict(server, "e", f"r{i}"), range(20)))
    assert [status for status, _, _ in answers] == [200] * 20
    assert [event[:2] for event in events(log)] == [["load", "e"]]
    assert value(scrape(server), "kserve_repository_loads_total", outcome="loaded") == 1


def test_a_failing_load_answers_503_with_its_reason_and_loads_once_fixed(serve, tmp_path):
    root, log, ok = tmp_path / "repo", tmp_path / "events.txt", tmp_path / "ok"
    root.mkdir()
    add_model(root, "flaky", "Flaky", events=str(log), ok=str(ok))
    broken = root / "broken"
    broken.mkdir()
    (broken / "model-settings.json").write_text('{"name": "broken", "implementation": "model.Scorer"}')
    (broken / "model.py").write_text("1 / 0\n")
    server = serve(str(root), "--model_control_mode", "lazy")
    status, headers, body = predict(server, "flaky")
    assert status == 503, body
    assert body["error"].startswith("Model with name flaky is not ready. Its load failed: ")
    assert "loading model 'flaky' raised RuntimeError: the ok file is missing" in body["error"]
    assert headers["retry-after"] == "1"
    assert index(server)["flaky"]["state"] == "UNAVAILABLE"
    assert "RuntimeError: the ok file is missing" in index(server)["flaky"]["reason"]
    # within the backoff the load is not tried again
    status, _, body = predict(server, "flaky")
    assert status == 503 and "Its last load failed" in body["error"] and "tried again in" in body["error"], body
    assert [event[0] for event in events(log)] == ["try"]
    ok.write_text("fixed")
    # after the backoff (1 s) a request tries again, and the model is served
    answered = eventually(lambda: predict(server, "flaky")[0] == 200, 15, interval=0.2, message=server.log)
    assert answered
    assert [event[0] for event in events(log)] == ["try", "try", "load"]
    assert index(server)["flaky"] == {"name": "flaky", "state": "READY"}
    samples = scrape(server)
    assert value(samples, "kserve_repository_loads_total", outcome="failed") == 1
    assert value(samples, "kserve_repository_loads_total", outcome="loaded") == 1
    # a model.py that raises at import: 503 naming the file, once fixed it loads too
    status, _, body = predict(server, "broken")
    assert status == 503, body
    assert f"{broken}/model.py: importing it raised ZeroDivisionError: division by zero" in body["error"]
    assert server.log().count("model.py: importing it raised ZeroDivisionError: division by zero\n") == 1  # logged once
    (broken / "model.py").write_text(f"from {MODELS} import Echo as Scorer\n")
    assert eventually(lambda: predict(server, "broken")[0] == 200, 15, interval=0.2, message=server.log)


def test_sizes_count_against_the_memory_budget_and_pinned_models_stay(serve, tmp_path):
    root, log = tmp_path / "repo", tmp_path / "events.txt"
    root.mkdir()
    for name, mb in [("m30", 30), ("m40", 40), ("m50", 50), ("huge", 200)]:
        add_model(root, name, "Sized", events=str(log), mb=mb)
    (root / "m30" / "model-settings.json").write_text(json.dumps(
        {"implementation": f"{MODELS}:Sized", "pinned": True, "parameters": {"extra": {"events": str(log), "mb": 30}}}))
    server = serve(str(root), "--model_control_mode", "lazy", "--max_model_memory_mb", "100")
    for name in ["m30", "m40"]:
        assert predict(server, name)[0] == 200
    samples = scrape(server)
    assert value(samples, "kserve_repository_model_memory_bytes", model_name="m40", version="") == 40 * 2 ** 20
    assert value(samples, "kserve_repository_model_memory_bytes", model_name="m30", version="") == 30 * 2 ** 20
    # 30 + 40 + 50 > 100: m40 goes (m30 is pinned, though less recently used)
    assert predict(server, "m50")[0] == 200
    assert states(server) == {"huge": "", "m30": "READY", "m40": "UNAVAILABLE", "m50": "READY"}
    assert value(scrape(server), "kserve_repository_model_memory_bytes", model_name="m40", version="") == 0
    # a model larger than the whole budget is refused, and nothing it would have needed goes
    status, headers, body = predict(server, "huge")
    assert status == 503 and headers["retry-after"] == "1", body
    assert body["error"] == ("no room for model 'huge': it takes about 200 MB, more than the whole "
                             "--max_model_memory_mb 100")
    assert states(server)["m50"] == "READY"
    assert [event[1] for event in events(log) if event[0] == "stop"] == ["m40", "huge"]


def test_grpc_reaches_a_lazy_model_and_its_readiness_does_not_load_it(serve, five):
    root, log = five
    server = serve(str(root), "--model_control_mode", "lazy")
    status, body = request(server.http_port, "GET", "/v2/models/a/ready")[::2]
    assert status == 503 and b"it loads on its first inference request" in body, body
    client = tgrpc.InferenceServerClient(server.grpc_url)
    assert client.is_model_ready("a") is False
    assert events(log) == []
    answer = client.infer("a", [triton_input(tgrpc, "x", np.array([2.0, 3.0], dtype=np.float32))])
    assert answer.as_numpy("output-0").tolist() == [2.0, 3.0]
    assert client.is_model_ready("a") is True
    assert [event[:2] for event in events(log)] == [["load", "a"]]
    assert triton_error(client.infer, "nope", [triton_input(tgrpc, "x", np.array([1.0], dtype=np.float32))]) == (
        "StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found. Model with name nope does not exist. "
                                "Models served: a.")


def test_each_worker_loads_lazily_on_its_own(serve, five):
    root, log = five
    server = serve(str(root), "--model_control_mode", "lazy", "--workers", "2", "--max_loaded_models", "1")
    answers = side_by_side(lambda: predict(server, "a")[2]["predictions"][2],
                           lambda pids: len(set(pids)) == 2, seconds=60)
    pids = set(answers)
    assert len(pids) == 2, answers
    loads = [event for event in events(log) if event[0] == "load"]
    assert sorted(int(event[3]) for event in loads) == sorted(pids)  # one load in each worker
    assert value(scrape(server), "kserve_repository_loaded_models") == 2  # summed over the workers
