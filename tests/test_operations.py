"""Operations: metrics over every protocol and worker, logging configuration, access and latency logs,
and a graceful shutdown that loses no request."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from tritonclient.utils import InferenceServerException

from helpers import post_json, request, scrape, value


def grpc_echo(server, n):
    client = tgrpc.InferenceServerClient(server.grpc_url)
    tensor = tgrpc.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], np.float32))
    for _ in range(n):
        client.infer("echo", [tensor])
    client.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_metrics_count_rest_grpc_and_streams(start_server, workers):
    server = start_server("tests/models/zoo.py", "--workers", workers, env={"ZOO_MODELS": "echo,failing"})
    v2 = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    for _ in range(7):
        assert post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]})[0] == 200
    for _ in range(5):
        assert post_json(server.http_port, "/v2/models/echo/infer", v2)[0] == 200
    for _ in range(3):
        assert post_json(server.http_port, "/v1/models/failing:predict", {"instances": ["invalid"]})[0] == 400
    grpc_echo(server, 6)
    for _ in range(4):
        response = httpx.post(f"{server.url}/v2/models/echo/infer_stream", json=v2)
        assert response.status_code == 200 and response.text.count("data: ") == 1
    for _ in range(4):  # several scrapes: with two workers, each may answer; all must see the totals
        samples = scrape(server)
        assert value(samples, "kserve_requests_total", model_name="echo", protocol="rest_v1", endpoint="predict",
                     status="200") == 7
        assert value(samples, "kserve_requests_total", model_name="echo", protocol="rest_v2", endpoint="infer",
                     status="200") == 5
        assert value(samples, "kserve_requests_total", model_name="failing", protocol="rest_v1",
                     endpoint="predict", status="400") == 3
        assert value(samples, "kserve_requests_total", model_name="echo", protocol="grpc", endpoint="ModelInfer",
                     status="OK") == 6
        assert value(samples, "kserve_requests_total", model_name="echo", protocol="rest_v2",
                     endpoint="infer_stream", status="200") == 4
        assert value(samples, "kserve_streams_total", model_name="echo", protocol="rest_v2") == 4
        assert value(samples, "kserve_request_duration_seconds_count", model_name="echo", protocol="grpc",
                     endpoint="ModelInfer", status="OK") == 6
        assert value(samples, "request_predict_seconds_count", model_name="echo") == 7 + 5 + 6 + 4
        assert value(samples, "request_preprocess_seconds_count", model_name="echo") == 7 + 5 + 6 + 4
        assert value(samples, "kserve_requests_in_flight", protocol="grpc") == 0
        assert any(name == "process_resident_memory_bytes" for name, _ in samples)


def test_metrics_content_negotiation(zoo):
    assert post_json(zoo.http_port, "/v1/models/echo:predict", {"instances": [1]})[0] == 200
    plain = httpx.get(f"{zoo.url}/metrics")
    assert plain.headers["content-type"].startswith("text/plain")
    openmetrics = httpx.get(f"{zoo.url}/metrics", headers={"Accept": "application/openmetrics-text"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.rstrip().endswith("# EOF")
    # Each body as its own format's parser reads it (OpenMetrics' strictly: one # EOF, each family's samples
    # together, buckets in order): the same families, the counters' names without _total in OpenMetrics.
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
    from prometheus_client.parser import text_string_to_metric_families as text_families

    in_text = {family.name: family.type for family in text_families(plain.text)}
    in_openmetrics = {family.name: family.type for family in openmetrics_families(openmetrics.text)}
    assert in_openmetrics == in_text and in_text["request_predict_seconds"] == "histogram"


LOG_CONFIGS = {
    "json": json.dumps({"version": 1, "disable_existing_loggers": False,
                        "formatters": {"f": {"format": "CFG-JSON %(name)s %(message)s"}},
                        "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "f"}},
                        "loggers": {"kserve": {"handlers": ["h"], "level": "INFO", "propagate": False}}}),
    "yaml": "version: 1\ndisable_existing_loggers: false\nformatters: {f: {format: 'CFG-YAML %(name)s %(message)s'}}\n"
            "handlers: {h: {class: logging.StreamHandler, formatter: f}}\n"
            "loggers: {kserve: {handlers: [h], level: INFO, propagate: false}}\n",
    "ini": "[loggers]\nkeys=root,kserve\n[handlers]\nkeys=h\n[formatters]\nkeys=f\n"
           "[logger_root]\nlevel=WARNING\nhandlers=h\n"
           "[logger_kserve]\nlevel=INFO\nhandlers=h\nqualname=kserve\npropagate=0\n"
           "[handler_h]\nclass=StreamHandler\nformatter=f\nargs=(sys.stderr,)\n"
           "[formatter_f]\nformat=CFG-INI %(name)s %(message)s\n",
}


@pytest.mark.parametrize("kind", ["json", "yaml", "ini"])
def test_log_config_file_changes_the_format(start_server, tmp_path, kind):
    path = tmp_path / f"logging.{'conf' if kind == 'ini' else kind}"
    path.write_text(LOG_CONFIGS[kind])
    server = start_server("tests/models/zoo.py", "--log_config_file", str(path), env={"ZOO_MODELS": "echo"},
                          grpc=False)
    assert f"CFG-{kind.upper()} kserve Registering model: echo" in server.log()


def test_configure_logging_false_leaves_the_root_config(start_server):
    server = start_server("tests/models/rootlog.py", "--configure_logging", "false", grpc=False)
    assert "ROOTCFG kserve model hello built" in server.log()
    assert "ROOTCFG kserve Registering model: hello" in server.log()


def test_access_and_latency_lines(start_server):
    fmt = "ACCESS %(method)s %(path)s %(status)s %(request_id)s %(model)s %(bytes)s %(duration_ms).1f"
    server = start_server("tests/models/zoo.py", "--access_log_format", fmt, env={"ZOO_MODELS": "echo"}, grpc=False)
    status, headers, _ = post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]},
                                   {"x-request-id": "trace-42"})
    assert status == 200 and headers["x-request-id"] == "trace-42"
    status, headers, _ = post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]})
    generated = headers["x-request-id"]
    assert len(generated) == 36
    log = server.log_with(f"requestId: {generated}")
    assert "ACCESS POST /v1/models/echo:predict 200 trace-42 echo 19 " in log
    assert "requestId: trace-42, preprocess_ms: " in log
    assert f"requestId: {generated}, preprocess_ms: " in log and "predict_ms: " in log and "postprocess_ms: " in log


def test_bad_access_log_format_is_reported_and_requests_are_served(start_server):
    server = start_server("tests/models/zoo.py", "--access_log_format", "%(nosuch)s", env={"ZOO_MODELS": "echo"},
                          grpc=False)
    status, _, body = post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]})
    assert status == 200 and body == {"predictions": [1]}
    assert "bad --access_log_format '%(nosuch)s': 'nosuch'" in server.log_with("bad --access_log_format", timeout=5)


def test_per_request_lines_written_directly_match_the_logging_module():
    """log_info_fast writes the per-request lines itself under the default configuration; they must read
    exactly as the logging module would write them, and go through the handlers under any other one."""
    import io
    import logging

    from kserve_sdk.logging import KSERVE_LOGGER_DATE_FORMAT, KSERVE_TRACE_LOGGER_FORMAT, Formatter, log_info_fast

    target = logging.getLogger("kserve_sdk.test.per_request")
    target.propagate, target.level = False, logging.INFO
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(Formatter(KSERVE_TRACE_LOGGER_FORMAT, KSERVE_LOGGER_DATE_FORMAT))
    target.addHandler(handler)
    try:
        fields = {"method": "POST", "ms": 1.23456}
        log_info_fast(target, "%(method)s took %(ms).3fms", fields)
        target.info("%(method)s took %(ms).3fms", fields)
        log_info_fast(target, "requestId: %s, predict_ms: %.3f", ("r-1", 0.5))
        direct, logged, positional = stream.getvalue().splitlines()
        assert direct.split(" ", 2)[2] == logged.split(" ", 2)[2] == f"{os.getpid()} {target.name} POST took 1.235ms"
        assert len(direct.split(" ", 2)[1]) == len(logged.split(" ", 2)[1]) == len("00:00:00.000")
        assert positional.endswith(f"{target.name} requestId: r-1, predict_ms: 0.500")
        with pytest.raises(KeyError):  # the caller (the access log) reports a bad --access_log_format
            log_info_fast(target, "%(nosuch)s", fields)

        seen = []
        target.addFilter(lambda record: seen.append(record.getMessage()) or True)  # not the default any more
        log_info_fast(target, "%(method)s again", fields)
        assert seen == ["POST again"] and stream.getvalue().splitlines()[-1].endswith("POST again")
    finally:
        target.removeHandler(handler)
        target.filters.clear()


def test_per_request_lines_on_the_loop_wait_briefly_and_go_out_together_in_order(monkeypatch):
    """On an event loop the per-request lines wait up to LINES_WAIT_S, then go out in order in one write;
    a record of the usual kind first writes what waits (the log keeps its order); flush_pending writes
    what still waits (a stopping server)."""
    import logging

    from kserve_sdk import logging as server_logging
    from kserve_sdk.logging import (
        KSERVE_LOGGER_DATE_FORMAT,
        KSERVE_TRACE_LOGGER_FORMAT,
        Formatter,
        flush_pending,
        log_info_fast,
    )

    class Recorder:
        def __init__(self):
            self.writes = []

        def write(self, text):
            self.writes.append(text)

        def flush(self):
            pass

    target = logging.getLogger("kserve_sdk.test.per_round")
    target.propagate, target.level = False, logging.INFO
    stream = Recorder()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(Formatter(KSERVE_TRACE_LOGGER_FORMAT, KSERVE_LOGGER_DATE_FORMAT))
    target.addHandler(handler)

    monkeypatch.setattr(server_logging, "LINES_WAIT_S", 0.5)  # a margin no loaded machine's pause reaches

    async def rounds():
        for i in range(3):
            log_info_fast(target, "line %d", (i,))
            await asyncio.sleep(0)
        assert stream.writes == []  # rounds went by, but they wait for the others of their moment
        await asyncio.sleep(0.6)
        assert len(stream.writes) == 1
        log_info_fast(target, "line %d", (3,))
        target.warning("a record of the usual kind")  # writes line 3 first, then itself
        log_info_fast(target, "line %d", (4,))
        flush_pending()  # as the server does before it stops

    try:
        asyncio.run(rounds())
    finally:
        target.removeHandler(handler)
    assert len(stream.writes) == 4, stream.writes
    assert [line.rsplit(" ", 2)[1:] for line in stream.writes[0].splitlines()] == [["line", str(i)] for i in range(3)]
    assert stream.writes[1].endswith(f"{target.name} line 3\n")
    assert stream.writes[2].endswith(" a record of the usual kind\n")
    assert stream.writes[3].endswith(f"{target.name} line 4\n")


def test_metric_values_read_back_by_prometheus_after_the_file_grows_and_after_a_fork(tmp_path):
    """kserve_sdk.internals.prometheus_values writes what prometheus-client's multi-process collector reads: many values
    (the file grows past its first mapping), values made before a fork and updated after it in both
    processes (each process counts in its own file; the scrape sums them)."""
    script = tmp_path / "values.py"
    script.write_text("""
import os, sys
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
counter = Counter("many", "many label values", ["key"])
for i in range(3000):  # ~100-byte keys: 300 KB, well past the first 64 KiB mapping
    counter.labels(f"label-{i:04d}-" + "x" * 40).inc(i)
latency = Histogram("latency_seconds", "latency", buckets=(0.1, 1.0))
latency.observe(0.05)
pid = os.fork()
if pid == 0:
    counter.labels("label-0001-" + "x" * 40).inc(1000)
    latency.observe(0.5)
    os._exit(0)
os.waitpid(pid, 0)
latency.observe(5)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(registry.get_sample_value("many_total", {"key": "label-0001-" + "x" * 40}))
print(registry.get_sample_value("many_total", {"key": "label-2999-" + "x" * 40}))
print([registry.get_sample_value("latency_seconds_bucket", {"le": le}) for le in ("0.1", "1.0", "+Inf")])
print(registry.get_sample_value("latency_seconds_sum"))
print(len(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])))
""")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    (tmp_path / "metrics").mkdir()
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert float(lines[0]) == 1 + 1000 and float(lines[1]) == 2999
    assert lines[2] == "[1.0, 2.0, 3.0]"  # cumulative: 0.05 | 0.5 (the child) | 5
    assert float(lines[3]) == pytest.approx(5.55)
    assert int(lines[4]) == 4  # counter and histogram files of the parent and of the child


async def _sleepy_requests(port, count, seconds):
    async def one():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps({"instances": [seconds]}).encode()
        writer.write(b"POST /v1/models/sleepy:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        data = await reader.read()
        writer.close()
        return data

    return await asyncio.gather(*[one() for _ in range(count)])


def _run_async_in_background(coro_fn, *args):
    import threading

    result = {}
    thread = threading.Thread(target=lambda: result.update(value=asyncio.run(coro_fn(*args))))
    thread.start()
    return thread, result


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_drains_requests_in_flight(start_server, workers):
    server = start_server("tests/models/zoo.py", "--workers", workers, "--grace_period", "10",
                          env={"ZOO_MODELS": "sleepy,echo"})
    thread, result = _run_async_in_background(_sleepy_requests, server.http_port, 50, 1.5)
    time.sleep(0.6)  # every request is in the model, sleeping
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # during the drain: not ready on a fresh connection, new inference refused (REST and gRPC)
    status, _, body = request(server.http_port, "GET", "/v2/health/ready")
    assert status == 503
    status, _, body = post_json(server.http_port, "/v1/models/echo:predict", {"instances": [1]})
    assert status == 503 and body == {"error": "Server is not ready. The server is shutting down."}
    with pytest.raises(InferenceServerException) as err:
        grpc_echo(server, 1)
    assert err.value.status() == "StatusCode.UNAVAILABLE" and "shutting down" in err.value.message()
    thread.join(timeout=30)
    responses = result["value"]
    assert len(responses) == 50
    assert all(r.startswith(b"HTTP/1.1 200") and b'"predictions"' in r for r in responses)
    assert server.wait_exit(timeout=15) == 0
    assert time.monotonic() - signalled < 10


def test_grace_period_bounds_the_drain(start_server):
    server = start_server("tests/models/zoo.py", "--grace_period", "1", env={"ZOO_MODELS": "sleepy"}, grpc=False)
    thread, result = _run_async_in_background(_sleepy_requests, server.http_port, 3, 30)
    time.sleep(0.5)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait_exit(timeout=15) == 0
    assert time.monotonic() - signalled < 4
    thread.join(timeout=10)
    assert "requests still in flight after the 1s grace period" in server.log()


def test_sigterm_lets_a_stream_finish(start_server):
    server = start_server("tests/models/streaming.py", "--grace_period", "10")
    body = {"text_input": " ".join(f"w{i}" for i in range(10)), "parameters": {"delay_ms": 100}}
    events = []
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{server.url}/v2/models/tokens/generate_stream", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if len(events) == 2:
                        server.proc.send_signal(signal.SIGTERM)
    assert [e["text_output"].strip() for e in events] == [f"w{i}" for i in range(10)]
    assert server.wait_exit(timeout=15) == 0
