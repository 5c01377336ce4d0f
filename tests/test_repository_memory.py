"""What a lazily served model repository keeps for a model once it is evicted, on a real server
(``python -m kserve_sdk --model_repository DIR --model_control_mode lazy --max_loaded_models 2``): serving 1,200
models in turn, after the first 400 the server's memory, its metric files (their bytes and the number of files in
the metrics directory) and its scrape stay flat, and a model that comes back counts from 0 in /metrics and in its
Triton statistics, as Triton drops an unloaded model's series."""
import json
import os
import struct

import pytest

from helpers import eventually, post_json, repository_server, request, scrape, v2_fp32_doc, value
from kserve_sdk import internals

pytestmark = pytest.mark.skipif(not internals.ENABLED, reason="with KSERVE_SDK_INTERNALS=off an evicted model's "
                                "metric series stay, as prometheus-client keeps them (docs/model-repository.md)")

MODELS = 1200
LOADED = 2
#: Models served before the first reading: every path (loads, evictions, compactions of the metric files) has run.
WARM = 400
#: The most the server may grow over the 800 later models: kept for good, each model's metric series, their index
#: entries and its statistics file took about 20 KiB (16 MiB in all); what is left is the repository's own few
#: hundred bytes per model it has loaded (its state in the index).
MOST_GROWTH_KIB = 2048
#: The most its metric files may use in all (the bytes of their entries): a file is compacted once the entries of
#: series let go reach 4 KiB or as much as those in use (model series are spread over 16 files per kind). Kept for
#: good, 1,200 models' series took 17 MB.
MOST_DB_BYTES = 512 * 1024
#: The most samples and model names one scrape may show: the two loaded models' series, and those let go since
#: the last compaction (reading 0). Kept for good, they were 84,000 samples of 1,200 models.
MOST_SAMPLES, MOST_MODELS = 2000, 200
FIRST = "m0000"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "repo"
    for i in range(MODELS):
        name = f"m{i:04d}"
        (root / name).mkdir(parents=True)
        settings = {"name": name, "implementation": "tests.models.repository_models:Echo"}
        (root / name / "model-settings.json").write_text(json.dumps(settings))
    (tmp_path / "metrics").mkdir()
    started = repository_server(str(root), "--model_control_mode", "lazy", "--max_loaded_models", str(LOADED),
                                env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")})
    started.start()
    eventually(lambda: request(started.http_port, "GET", "/v2/health/ready")[0] == 200, 30, message=started.log)
    started.metrics_dir = str(tmp_path / "metrics")
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


def used_bytes(path: str) -> int:
    """The bytes a prometheus-client metric file uses (its first 4 bytes say; the rest is preallocated)."""
    with open(path, "rb") as f:
        return struct.unpack("i", f.read(4))[0]


def footprint(server) -> dict:
    """The server's RSS (KiB), the bytes its metric files use, the files in its metrics directory, and the
    samples and model names of one scrape."""
    rss = quiet_rss(server)
    names = os.listdir(server.metrics_dir)
    samples = scrape(server)
    return {"rss_kib": rss, "db_bytes": sum(used_bytes(os.path.join(server.metrics_dir, name))
                                            for name in names if name.endswith(".db")),
            "files": len(names), "samples": len(samples),
            "models": len({dict(labels).get("model_name") for _, labels in samples} - {None})}


def test_an_evicted_models_series_and_statistics_go_and_count_from_0_when_it_comes_back(server):
    for _ in range(3):
        infer(server, FIRST)
    for i in range(1, WARM):
        infer(server, f"m{i:04d}")
    before = footprint(server)
    for i in range(WARM, MODELS):
        infer(server, f"m{i:04d}")
    after = footprint(server)
    growth = after["rss_kib"] - before["rss_kib"]
    assert growth < MOST_GROWTH_KIB, f"RSS grew {growth} KiB over {MODELS - WARM} models: {before} -> {after}"
    for reading in (before, after):
        assert reading["db_bytes"] <= MOST_DB_BYTES, (before, after)
        assert reading["samples"] <= MOST_SAMPLES and reading["models"] <= MOST_MODELS, (before, after)
    assert after["files"] <= before["files"], (before, after)  # a statistics file per model loaded, no more

    status, _, index = post_json(server.http_port, "/v2/repository/index", {})
    assert status == 200
    ready = [entry["name"] for entry in index if entry.get("state") == "READY"]
    assert len(ready) == LOADED and FIRST not in ready, ready

    for _ in range(2):  # loaded again: its series and statistics count from 0
        infer(server, FIRST)
    samples = scrape(server)
    labels = {"model_name": FIRST, "protocol": "rest_v2", "endpoint": "infer", "status": "200"}
    assert value(samples, "kserve_requests_total", **labels) == 2
    assert value(samples, "request_predict_seconds_count", model_name=FIRST) == 2
    assert value(samples, "kserve_request_duration_seconds_count", **labels) == 2
    status, _, stats = request(server.http_port, "GET", f"/v2/models/{FIRST}/stats")
    assert status == 200
    assert json.loads(stats)["model_stats"][0]["inference_count"] == 2
