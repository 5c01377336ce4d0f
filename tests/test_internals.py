"""Each trick of kserve_sdk/internals/ against the pinned libraries: the internal it uses still exists and
behaves as the trick expects, or the test fails naming it. And the switch: with KSERVE_SDK_INTERNALS=off
a real server takes the plain paths and still counts, logs and balances."""
import argparse
import asyncio
import inspect
import logging
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import tornado.tcpserver
from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream, StreamClosedError, UnsatisfiableReadError
from tornado.web import Application, RequestHandler

from conftest import ROOT, http_get
from kserve_sdk import internals
from kserve_sdk.internals import (
    argparse_exact,
    log_records,
    ray_private,
    tornado_accept,
    tornado_buffer,
    tornado_headers,
    tornado_overflow,
    tornado_sent,
)

pytestmark = pytest.mark.skipif(not internals.ENABLED, reason="checks the tricks themselves (KSERVE_SDK_INTERNALS=off)")


def _run_python(code: str, tmp_path, **env: str) -> str:
    """Run ``code`` in a fresh interpreter (prometheus-client picks its value class at first import)."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir(exist_ok=True)
    full_env = {**os.environ, "PYTHONPATH": ROOT, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), **env}
    out = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


PROMETHEUS_VALUES = """
import inspect
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess, values, mmap_dict
from kserve_sdk.internals.prometheus_values import SlotValue
assert values.ValueClass is SlotValue, "prometheus_client.values.ValueClass was not replaced"
params = list(inspect.signature(values.MultiProcessValue()).parameters)
assert params[:6] == ["typ", "metric_name", "name", "labelnames", "labelvalues", "help_text"], \\
    f"prometheus_client.values.MultiProcessValue's value class now takes {params}"
counter = Counter("c", "a counter", ["k"])
counter.labels("a").inc(3)
child = counter.labels("a")
assert child._value._key == mmap_dict.mmap_key("c", "c_total", ["k"], ["a"], "a counter"), \\
    "prometheus_client.mmap_dict.mmap_key makes other keys than SlotValue"
Gauge("g", "a gauge", multiprocess_mode="livesum").set(7)
Histogram("h", "a histogram", buckets=(1.0,)).observe(0.5)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(registry.get_sample_value("c_total", {"k": "a"}), registry.get_sample_value("g"),
      registry.get_sample_value("h_bucket", {"le": "1.0"}), registry.get_sample_value("h_sum"))
"""


def test_prometheus_value_class_is_replaced_and_read_back_by_the_collector(tmp_path):
    """prometheus_values: ``values.ValueClass``, its constructor's arguments, ``mmap_key`` and the file layout
    that ``MultiProcessCollector`` reads."""
    assert _run_python(PROMETHEUS_VALUES, tmp_path).split() == ["3.0", "7.0", "1.0", "0.5"]


PROMETHEUS_WRITERS = """
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from kserve_sdk.internals.prometheus_writers import SlotCount, SlotHistogram, direct_writer
hist = Histogram("h", "a histogram", ["m"], buckets=(0.1, 1.0))
child = hist.labels("x")
for name in ("_buckets", "_sum", "_upper_bounds"):
    assert hasattr(child, name), f"prometheus_client.Histogram's child has no {name}"
assert list(child._upper_bounds) == [0.1, 1.0, float("inf")], f"Histogram child's _upper_bounds: {child._upper_bounds}"
assert len(child._buckets) == 3, f"Histogram child's _buckets has {len(child._buckets)} values for 3 bounds"
writer = direct_writer(child)
assert type(writer) is SlotHistogram, f"a Histogram child is written through {type(writer)}"
for amount in (0.05, 0.1, 0.5, 5.0):
    writer.observe(amount)
counter = direct_writer(Counter("c", "a counter"))
assert type(counter) is SlotCount, "prometheus_client.Counter's child has no _value of the SlotValue class"
counter.inc(2)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print([registry.get_sample_value("h_bucket", {"m": "x", "le": le}) for le in ("0.1", "1.0", "+Inf")],
      registry.get_sample_value("h_sum", {"m": "x"}), registry.get_sample_value("c_total"))
"""


def test_prometheus_children_are_written_directly_and_count_like_prometheus_client(tmp_path):
    """prometheus_writers: a child's ``_value``, ``_buckets`` (one per bound, ``le`` inclusive), ``_sum``
    and ``_upper_bounds``."""
    out = _run_python(PROMETHEUS_WRITERS, tmp_path)
    assert out.split("] ")[0] == "[2.0, 3.0, 4.0"  # cumulative: 0.05 and 0.1 | 0.5 | 5.0
    assert [float(x) for x in out.split("] ")[1].split()] == pytest.approx([5.65, 2.0])


PROMETHEUS_CHILDREN = """
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, Counter, multiprocess
from kserve_sdk.internals.prometheus_children import drop_children
counter = Counter("c", "a counter", ["model_name", "k"])
for name in ("_labelnames", "_metrics", "_lock"):
    assert hasattr(counter, name), f"prometheus_client.Counter has no {name}"
counter.labels("gone", "a").inc(2)
counter.labels("kept", "a").inc(1)
drop_children([counter], "model_name", "gone")
print(sorted(labels[0] for labels in counter._metrics))
counter.labels("gone", "a").inc(3)  # made again: it continues from its count in the file
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(registry.get_sample_value("c_total", {"model_name": "gone", "k": "a"}))
"""


def test_a_model_names_children_are_dropped_and_its_count_continues_when_made_again(tmp_path):
    """prometheus_children: a labelled metric's ``_labelnames``, ``_metrics`` and ``_lock``."""
    assert _run_python(PROMETHEUS_CHILDREN, tmp_path).splitlines() == ["['kept']", "5.0"]


PROMETHEUS_GAPS = """
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, Histogram, multiprocess
from kserve_sdk.internals.prometheus_writers import direct_writer, gap_writer
hist = Histogram("t", "gaps", buckets=(0.1, 1.0))
gaps = gap_writer(direct_writer(hist), 0.1)
print(type(gaps).__name__, gaps.least)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
def seen():
    return [registry.get_sample_value("t_bucket", {"le": le}) for le in ("0.1", "1.0", "+Inf")] + [
        round(registry.get_sample_value("t_sum") or 0.0, 9)]
gaps.add_least(2, 0.15)  # two short gaps (0.05 and 0.1: le is inclusive), counted by the stream
print(seen())
gaps.observe(0.5)
print(seen())
gaps.observe(5.0)
print(seen())
"""


PROMETHEUS_LET_GO = """
import os
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
def count(model):
    labels = {"model_name": model, "protocol": "rest_v2", "endpoint": "infer", "status": "200"}
    return registry.get_sample_value("kserve_requests_total", labels)
def served(model, times=1):
    for _ in range(times):
        metrics.request_finished(model, "rest_v2", "infer", "200", 0.01, started=False)
served("kept", 2)
served("gone", 3)
metrics.forget_model("gone")
print(count("kept"), count("gone"))
for i in range(1500):  # enough models let go to compact every file
    served(f"m{i:04d}")
    metrics.forget_model(f"m{i:04d}")
served("gone")
print(count("kept"), count("gone"), count("m0000"))
pid = os.fork()  # the values, moved to the child's own files, keep counting there
if pid == 0:
    served("kept")
    os._exit(0)
os.waitpid(pid, 0)
served("kept")
print(count("kept"))
"""


def test_a_forgotten_model_names_series_leave_the_files_and_count_from_0_when_made_again(tmp_path):
    """prometheus_values.let_go (metrics.forget_model, through prometheus_children's dropped children): the
    series read 0 at once, leave the files once they are compacted, and start from 0 when made again; values and
    their direct writers keep counting across the compaction and a fork."""
    lines = _run_python(PROMETHEUS_LET_GO, tmp_path).splitlines()
    assert lines == ["2.0 0.0", "2.0 1.0 None", "4.0"]


@pytest.mark.parametrize("internals, kind", [("on", "SlotGaps"), ("off", "ReplayGaps")])
def test_gaps_land_in_the_buckets_observe_would_pick(tmp_path, internals, kind):
    """prometheus_writers.gap_writer (a stream's gaps between chunks): the short gaps a stream counted
    itself added to the first bucket and the sum at once, longer ones observed; the buckets and sum that
    observing each would give, tricks on (into the slots) or off."""
    lines = _run_python(PROMETHEUS_GAPS, tmp_path, KSERVE_SDK_INTERNALS=internals).splitlines()
    assert lines[0] == f"{kind} 0.1"
    assert lines[1] == "[2.0, 2.0, 2.0, 0.15]"
    assert lines[2] == "[2.0, 3.0, 3.0, 0.65]"
    assert lines[3] == "[2.0, 3.0, 4.0, 5.65]"


def test_prometheus_tricks_off_leave_prometheus_client_alone(tmp_path):
    out = _run_python("from kserve_sdk import metrics\nmetrics.setup()\n"
                      "from prometheus_client import Histogram, values\n"
                      "from kserve_sdk.internals.prometheus_writers import direct_writer\n"
                      "child = Histogram('h', 'h')\n"
                      "print(values.ValueClass.__name__, direct_writer(child) is child)",
                      tmp_path, KSERVE_SDK_INTERNALS="off")
    assert out.split() == ["MmapedValue", "True"]  # the class values.MultiProcessValue() makes


PROMETHEUS_SCRAPE = """
import os
from kserve_sdk import metrics
metrics.setup()
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, exposition, multiprocess
from prometheus_client import openmetrics, utils
for module, name in ((openmetrics.exposition, "escape_metric_name"), (openmetrics.exposition, "escape_label_name"),
                     (openmetrics.exposition, "UNDERSCORES"), (utils, "floatToGoString")):
    assert hasattr(module, name), f"{module.__name__} has no {name}"
Counter("c", "a counter", ["model_name"]).labels('say "hi"\\n').inc(2)
Gauge("g", "a gauge", multiprocess_mode="max").set(3)
Gauge("per_pid", "a gauge of each process", multiprocess_mode="all").set(4)
Histogram("h", "a histogram", ["model_name"], buckets=(0.1, 1.0)).labels("m").observe(0.5)
Summary("s", "a summary").observe(2.5)
for accept in ("", "application/openmetrics-text; version=1.0.0"):
    ours = metrics.render(accept)[0].decode()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    theirs = exposition.choose_encoder(accept)[0](registry).decode()
    own = [line for line in ours.splitlines() if "process_" not in line and line != "# EOF"]
    print(sorted(own) == sorted(line for line in theirs.splitlines() if line != "# EOF"), len(own),
          ours.endswith("# EOF\\n"))
"""


def test_a_scrape_of_the_metric_files_writes_what_prometheus_client_writes(tmp_path):
    """prometheus_scrape: the multi-process file layout, the merge, and the encoders' escaping helpers."""
    lines = _run_python(PROMETHEUS_SCRAPE, tmp_path).splitlines()
    assert lines == ["True 20 False", "True 20 True"]


class _Hello(RequestHandler):
    def get(self) -> None:
        self.set_header("x-request-id", "rid-1")
        self.write(b"hello")


async def _get_over(sockets, hand_over_enabled: bool) -> bytes:
    """An answer from a Tornado server that accepts ``sockets`` through accept_balanced."""
    server = HTTPServer(Application([("/", _Hello)]))
    tornado_accept.ENABLED = hand_over_enabled
    try:
        tornado_accept.accept_balanced(server, sockets, lambda: 0)
    finally:
        tornado_accept.ENABLED = internals.ENABLED
    port = sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    server.stop()
    return answer


@pytest.mark.parametrize("enabled", [True, False], ids=["internal", "public"])
def test_accepted_connections_are_handed_to_the_server(enabled):
    """tornado_accept: ``TCPServer._handle_connection(connection, address)``, and the public path."""
    params = list(inspect.signature(tornado.tcpserver.TCPServer._handle_connection).parameters)
    assert params == ["self", "connection", "address"], f"TCPServer._handle_connection now takes {params}"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        answer = asyncio.run(_get_over([sock], enabled))
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"hello"), answer


async def _buffered_after_one_byte(payload: bytes) -> int:
    left, right = socket.socketpair()
    stream = IOStream(left)
    right.sendall(payload)
    await stream.read_bytes(1)
    size = stream._read_buffer_size
    stream.close()
    right.close()
    return size


def test_read_buffer_size_counts_the_unread_bytes():
    """tornado_buffer: ``IOStream._read_buffer_size`` is the bytes read from the socket and not yet consumed."""
    assert hasattr(IOStream(socket.socket()), "_read_buffer_size"), "tornado's IOStream has no _read_buffer_size"
    assert asyncio.run(_buffered_after_one_byte(b"x" * 100)) == 99, "IOStream._read_buffer_size is not the unread bytes"

    class Connection:  # what body_already_buffered reads: HTTP1Connection's public ``stream``
        stream = type("Stream", (), {"_read_buffer_size": 99})()

    assert tornado_buffer.body_already_buffered(Connection(), 99)
    assert not tornado_buffer.body_already_buffered(Connection(), 100)


async def _sent_after_writing(payload: bytes) -> int:
    left, right = socket.socketpair()
    stream = IOStream(left)
    await stream.write(payload)
    sent = tornado_sent.bytes_sent(stream)
    stream.close()
    right.close()
    return sent


def test_bytes_sent_counts_what_the_socket_took(monkeypatch):
    """tornado_sent: ``IOStream._total_write_done_index`` is the bytes the stream wrote to its socket."""
    assert hasattr(IOStream(socket.socket()), "_total_write_done_index"), \
        "tornado's IOStream has no _total_write_done_index"
    assert asyncio.run(_sent_after_writing(b"x" * 100)) == 100, "IOStream._total_write_done_index is not the bytes sent"
    monkeypatch.setattr(tornado_sent, "ENABLED", False)
    assert asyncio.run(_sent_after_writing(b"x" * 100)) is None


async def _answer_of_an_overflowing_read() -> bytes:
    """What the peer of a stream receives when the stream's read passes its ``max_bytes`` (the header read's
    failure), with answer_overflow installed."""
    left, right = socket.socketpair()
    right.setblocking(False)
    stream = IOStream(left)
    tornado_overflow.answer_overflow(stream, lambda: b"HTTP/1.1 431 Too Large\r\n\r\n")
    right.sendall(b"x" * 100)
    with pytest.raises(StreamClosedError):
        await stream.read_until_regex(b"\r\n\r\n", max_bytes=16)
    assert isinstance(stream.error, UnsatisfiableReadError), f"the stream closed on {stream.error!r}"
    loop, received = asyncio.get_running_loop(), b""
    while chunk := await asyncio.wait_for(loop.sock_recv(right, 1024), 10):
        received += chunk
    right.close()  # the stream's socket, draining what its peer sends, sees the end and closes
    await asyncio.wait_for(_closed(left), 10)
    return received


async def _closed(sock: socket.socket) -> None:
    while sock.fileno() != -1:
        await asyncio.sleep(0.01)


def test_a_read_past_its_limit_is_answered_before_the_socket_closes(monkeypatch):
    """tornado_overflow: a read past ``max_bytes`` closes the stream with an ``UnsatisfiableReadError`` as its
    ``error``, through ``close_fd``, and the answer reaches the peer; the plain path sends nothing."""
    assert callable(getattr(IOStream, "close_fd", None)), "tornado's IOStream has no close_fd"
    assert asyncio.run(_answer_of_an_overflowing_read()) == b"HTTP/1.1 431 Too Large\r\n\r\n"
    monkeypatch.setattr(tornado_overflow, "ENABLED", False)
    assert asyncio.run(_answer_of_an_overflowing_read()) == b""


class _Recorded(tornado_headers._Recording, _Hello):
    """The plain path's handler: headers recorded through the public setters."""


async def _logged_headers(handler_class) -> dict:
    logged = {}

    def log_function(handler) -> None:
        headers = tornado_headers.response_headers(handler)
        logged.update({"length": headers.get("Content-Length"), "request_id": headers.get("x-request-id")})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    server = HTTPServer(Application([("/", handler_class)], log_function=log_function))
    server.add_sockets([sock])
    reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await asyncio.wait_for(reader.read(), 10)
    writer.close()
    server.stop()
    sock.close()
    return logged


def test_response_headers_are_read_from_the_handler():
    """tornado_headers: ``RequestHandler._headers`` holds the answer's headers when Tornado calls log_function."""
    assert asyncio.run(_logged_headers(_Hello)) == {"length": "5", "request_id": "rid-1"}, \
        "RequestHandler._headers does not hold the answer's headers"


def test_response_headers_recorded_through_the_public_setters(monkeypatch):
    monkeypatch.setattr(tornado_headers, "ENABLED", False)
    assert asyncio.run(_logged_headers(_Recorded)) == {"length": "5", "request_id": "rid-1"}


def test_hand_built_log_records_have_makerecords_fields():
    """log_records: ``logging._startTime`` and the attributes ``LogRecord.__init__`` sets."""
    assert isinstance(getattr(logging, "_startTime", None), float), "logging has no float _startTime"
    target = logging.getLogger("kserve.test_internals")
    made = vars(target.makeRecord(target.name, logging.INFO, "", 0, "line %s", (1,), None))
    built = vars(log_records.info_record(target, "line %s", (1,)))
    assert sorted(built) == sorted(made), "LogRecord's attributes changed: " + str(set(built) ^ set(made))
    # the times of the two records differ; so does a timestamp a record factory may add (Ray's, once ray is imported)
    timed = {"created", "msecs", "relativeCreated"} | {k for k in made if k.endswith("timestamp_ns")}
    assert {k: v for k, v in built.items() if k not in timed} == {k: v for k, v in made.items() if k not in timed}
    assert built["relativeCreated"] == pytest.approx(made["relativeCreated"], abs=1000)
    assert logging.makeLogRecord(built).getMessage() == "line 1"


def test_one_dash_flags_match_only_exactly():
    """argparse_exact: ``ArgumentParser._get_option_tuples(option_string)``."""
    params = list(inspect.signature(argparse.ArgumentParser._get_option_tuples).parameters)
    assert params == ["self", "option_string"], f"argparse.ArgumentParser._get_option_tuples now takes {params}"
    parser = argparse_exact.ExactOneDashParser(add_help=False, allow_abbrev=False)
    parser.add_argument("-model_name", "--model_name")
    args, rest = parser.parse_known_args(["-m", "slow", "-model_name", "x"])
    assert args.model_name == "x" and rest == ["-m", "slow"]
    args, rest = parser.parse_known_args(["--model_name=y"])
    assert args.model_name == "y" and rest == []


def test_the_switch_is_read_from_the_environment(tmp_path):
    code = "from kserve_sdk import internals\nprint(internals.ENABLED)"
    assert _run_python(code, tmp_path, KSERVE_SDK_INTERNALS="off").strip() == "False"
    assert [internals.switched_on(v) for v in ("off", " OFF", "0", "false", "No")] == [False] * 5
    assert [internals.switched_on(v) for v in ("on", "1", "", "yes")] == [True] * 4


def test_a_server_of_two_workers_with_the_tricks_off_counts_and_logs(start_server):
    """The plain paths together in a real server: prometheus-client's own values (summed over two workers),
    the public accept hand-over, headers recorded for the access log, records made by makeRecord."""
    fmt = "access %(status)s %(bytes)s %(request_id)s"
    server = start_server("tests/models/zoo.py", "--workers", "2", "--access_log_format", fmt,
                          env={"KSERVE_SDK_INTERNALS": "off", "ZOO_MODELS": "echo"}, grpc=False)
    body = b'{"instances": [[1, 2]]}'
    for i in range(6):
        request = urllib.request.Request(server.url + "/v1/models/echo:predict", data=body,
                                         headers={"x-request-id": f"off-{i}", "Connection": "close"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200
    status, scrape = http_get(server.url + "/metrics")
    assert status == 200
    counted = re.search(rb'kserve_requests_total\{[^}]*endpoint="predict"[^}]*status="200"[^}]*\} (\S+)', scrape)
    assert counted and float(counted.group(1)) == 6.0, scrape.decode()[:3000]
    deadline = time.monotonic() + 10
    while "off-5" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert re.search(r"access 200 \d+ off-5", server.log()), server.log()[-3000:]


def test_ray_still_has_the_node_and_the_auto_connect_switch():
    """ray_private: ``ray._private.worker._global_node`` and ``ray._private.auto_init_hook.enable_auto_connect``
    (checked without starting Ray; tests/test_ray.py stops real ones)."""
    pytest.importorskip("ray")  # the imports below bind `ray` to the same module
    import ray._private.auto_init_hook  # noqa: F401  (what `ray` itself imports, named for the check)
    import ray._private.worker  # noqa: F401

    assert hasattr(ray._private.worker, "_global_node"), "ray._private.worker has no _global_node"
    hook = ray._private.auto_init_hook
    assert isinstance(getattr(hook, "enable_auto_connect", None), bool), \
        "ray._private.auto_init_hook has no enable_auto_connect"
    assert ray_private.local_ray_broken(ray) is False  # no Ray started in this process
    before = hook.enable_auto_connect
    try:
        ray_private.forbid_auto_connect(ray)
        assert hook.enable_auto_connect is False
    finally:
        hook.enable_auto_connect = before
