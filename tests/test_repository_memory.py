"""What a lazily served model repository keeps for a model once it is evicted, on a real server
(``python -m kserve_sdk --model_repository DIR --model_control_mode lazy --max_loaded_models 20``): after one
request to each of 600 models, the server's memory has grown by far less per model than the metric series,
statistics and scheduler state of a served model take, and a model that comes back continues its counts
(Prometheus and Triton statistics)."""
import json
import os

import pytest

from helpers import eventually, post_json, repository_server, request, scrape, v2_fp32_doc, value

MODELS = 600
LOADED = 20
#: Requests to these first models warm every path (loads, evictions, metrics files) before the first reading.
WARM = 60
#: The most the server may grow per model served once: each of the 540 later models' series, statistics and
#: plans, kept for good, took several times this.
MOST_KIB_PER_MODEL = 40
FIRST = "m000"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.fixture
def server(tmp_path):
    for i in range(MODELS):
        name = f"m{i:03d}"
        (tmp_path / name).mkdir()
        settings = {"name": name, "implementation": "tests.models.repository_models:Echo"}
        (tmp_path / name / "model-settings.json").write_text(json.dumps(settings))
    started = repository_server(str(tmp_path), "--model_control_mode", "lazy", "--max_loaded_models", str(LOADED))
    started.start()
    eventually(lambda: request(started.http_port, "GET", "/v2/health/ready")[0] == 200, 30, message=started.log)
    yield started
    started.stop()
    os.unlink(started.log_file.name)


def infer(server, name: str) -> None:
    status, _, doc = post_json(server.http_port, f"/v2/models/{name}/infer", v2_fp32_doc())
    assert status == 200, doc
    assert doc["outputs"][0]["data"] == [1.0, 2.0]


def quiet_rss(server) -> int:
    """The server's RSS once two readings a moment apart agree within 1 MiB (its answers are out)."""
    def settled() -> int:
        first = rss_kib(server.proc.pid)
        post_json(server.http_port, "/v2/repository/index", {})
        second = rss_kib(server.proc.pid)
        assert abs(second - first) < 1024, (first, second)
        return second
    return eventually(settled, 20, interval=0.2)


def test_an_evicted_model_leaves_little_memory_behind_and_continues_its_counts_when_back(server):
    for _ in range(3):
        infer(server, FIRST)
    for i in range(1, WARM):
        infer(server, f"m{i:03d}")
    before = quiet_rss(server)
    for i in range(WARM, MODELS):
        infer(server, f"m{i:03d}")
    after = quiet_rss(server)
    per_model = (after - before) / (MODELS - WARM)
    assert per_model < MOST_KIB_PER_MODEL, f"RSS grew {per_model:.1f} KiB per model ({before} -> {after} KiB)"

    status, _, index = post_json(server.http_port, "/v2/repository/index", {})
    assert status == 200
    ready = [entry["name"] for entry in index if entry.get("state") == "READY"]
    assert len(ready) == LOADED and FIRST not in ready, ready

    for _ in range(2):  # loaded again: its series and statistics continue from 3
        infer(server, FIRST)
    samples = scrape(server)
    labels = {"model_name": FIRST, "protocol": "rest_v2", "endpoint": "infer", "status": "200"}
    assert value(samples, "kserve_requests_total", **labels) == 5
    assert value(samples, "request_predict_seconds_count", model_name=FIRST) == 5
    assert value(samples, "kserve_request_duration_seconds_count", **labels) == 5
    status, _, stats = request(server.http_port, "GET", f"/v2/models/{FIRST}/stats")
    assert status == 200
    assert json.loads(stats)["model_stats"][0]["inference_count"] == 5
