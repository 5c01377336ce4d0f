"""The jobs runner on a real server with a real SQLite store (tests/models/job_runner_models.py): jobs put in the
store (by this process, as another replica would, or through the REST API) run and keep the synchronous answer;
a model error and an unknown model fail as the route answers; a job canceled in the store is cancelled in its
model within a second; a result over --max_job_result_bytes fails naming the limit; a callback arrives with the
status document and is tried again after a 500; jobs wait below synchronous calls; SIGTERM finishes running jobs
within the grace period or hands them back; a server that gets no job writes no file, and finished jobs are
purged after --job_retention_seconds."""
import asyncio
import json
import os
import secrets
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from helpers import Server, eventually, free_port, post_json, post_json_raw, request, scrape, value
from kserve_sdk.jobs import open_store
from kserve_sdk.jobs.store import (
    CANCELED,
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    PENDING,
    Job,
    JobRequest,
    StoredReply,
)

MODELS = "tests/models/job_runner_models.py"


class StoreClient:
    """The server's store, opened in this process on an event loop of its own (a thread)."""

    def __init__(self, url: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.store = open_store(url)

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            coroutine = getattr(self.store, method)(*args, **kwargs)
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)
        return call

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.store.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Receiver:
    """An HTTP server in this process taking job callbacks: it notes each POST and answers the statuses queued
    for its path in turn, then 200."""

    def __init__(self) -> None:
        self.port = free_port()
        self.answers: Dict[str, List[int]] = {}
        self.got: List[Tuple[float, str, Dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.got.append((time.monotonic(), self.path, {k.lower(): v for k, v in self.headers.items()},
                                     body))
                queued = receiver.answers.get(self.path) or [200]
                self.send_response(queued.pop(0))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def posts_to(self, path: str) -> List[Tuple[float, str, Dict[str, str], bytes]]:
        return [got for got in self.got if got[1] == path]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _store_url(folder: Any) -> str:
    return f"sqlite:///{os.path.join(str(folder), 'jobs.sqlite3')}"  # an absolute path: sqlite:////...


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    yield got
    got.stop()


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    return _store_url(tmp_path_factory.mktemp("jobs"))


@pytest.fixture(scope="module")
def server(start_server, store_url, receiver) -> Server:
    return start_server(MODELS, "--jobs_store", store_url, "--job_callback_hosts", f"127.0.0.1:{receiver.port}",
                        "--max_job_result_bytes", "4096", "--job_lease_seconds", "5", grpc=False)


@pytest.fixture(scope="module")
def store(store_url) -> Iterator[StoreClient]:
    client = StoreClient(store_url)
    yield client
    client.stop()


# --- requests and waiting ---------------------------------------------------------------------------------
def v2_body(tag: int, **parameters: Any) -> bytes:
    doc: Dict[str, Any] = {"inputs": [{"name": "TAG", "shape": [1], "datatype": "INT64", "data": [tag]}]}
    if parameters:
        doc["parameters"] = parameters
    return json.dumps(doc).encode()


def submit_v2(store: StoreClient, model: str, tag: int, callback_url: Optional[str] = None,
              **parameters: Any) -> Job:
    request_id = f"job-{model}-{tag}-{time.monotonic_ns()}"
    headers = {"content-type": "application/json", "x-request-id": request_id}
    return store.submit(JobRequest("v2", model, None, headers, v2_body(tag, **parameters)), request_id, callback_url)


def submit_v1(store: StoreClient, model: str, doc: Any) -> Job:
    request_id = f"job-{model}-{time.monotonic_ns()}"
    headers = {"content-type": "application/json", "x-request-id": request_id}
    return store.submit(JobRequest("v1", model, None, headers, json.dumps(doc).encode()), request_id)


def ended(store: StoreClient, job: Job, status: str, server: Server, timeout: float = 20.0) -> Job:
    """The job once it has ``status``; fails (with the server's log) after ``timeout`` s."""
    def reached() -> Job:
        now = store.get(job.id)
        assert now is not None and now.status == status, now
        return now
    return eventually(reached, timeout, message=lambda: server.log()[-3000:])


def notes(server: Server, model: str) -> List[Dict[str, Any]]:
    status, _, doc = post_json(server.http_port, "/v1/models/ledger:predict", {"instances": [model]})
    assert status == 200, doc
    return doc["predictions"]


def note_of(server: Server, model: str, tag: int) -> Dict[str, Any]:
    def found() -> Dict[str, Any]:
        mine = [note for note in notes(server, model) if note["tag"] == tag]
        assert mine, f"model {model} has not run tag {tag}"
        return mine[-1]
    return eventually(found, 20, message=lambda: server.log()[-3000:])


def synchronous(server: Server, model: str, body: bytes) -> Tuple[int, Dict[str, str], bytes]:
    return request(server.http_port, "POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})


# --- running jobs -------------------------------------------------------------------------------------------
def test_a_job_in_the_store_runs_with_its_request_id_and_keeps_the_synchronous_answer(server, store):
    job = submit_v2(store, "echo", 7)
    done = ended(store, job, COMPLETED, server)
    assert done.attempts == 1 and done.started is not None and done.finished >= done.started and done.error is None
    assert note_of(server, "echo", 7)["request_id"] == job.request_id  # the model saw the submit's id
    reply = store.result(job.id)
    status, headers, body = synchronous(server, "echo", v2_body(7))
    assert (reply.status, reply.headers["content-type"]) == (status, headers["content-type"]) == (200,
                                                                                                  "application/json")
    answer, synchronous_answer = json.loads(reply.body), json.loads(body)
    assert answer["id"] == job.request_id  # an answer without an id of its own carries the call's request id
    assert {**answer, "id": None} == {**synchronous_answer, "id": None}
    server.log_with(f"requestId: {job.request_id}, preprocess_ms")  # the latency line names it


def test_a_model_error_fails_the_job_with_the_routes_500(server, store):
    job = submit_v2(store, "broken", 1)
    failed = ended(store, job, FAILED, server)
    status, headers, body = synchronous(server, "broken", v2_body(1))
    assert status == 500 and "row 3 is bad" in json.loads(body)["error"]
    reply = store.result(job.id)
    assert (reply.status, reply.headers["content-type"], reply.body) == (500, headers["content-type"], body)
    assert failed.error == json.loads(body)["error"]


def test_a_job_for_a_model_the_server_lacks_fails_with_the_routes_404(server, store):
    job = submit_v2(store, "nosuch", 1)
    failed = ended(store, job, FAILED, server)
    status, _, body = synchronous(server, "nosuch", v2_body(1))
    assert status == 404
    assert store.result(job.id) == StoredReply(404, {"content-type": "application/json"}, body)
    assert failed.error == json.loads(body)["error"] and "nosuch" in failed.error


def test_a_running_job_canceled_in_the_store_is_cancelled_in_its_model_within_a_second(server, store):
    job = submit_v2(store, "held", 11, hold=True)
    assert note_of(server, "held", 11)["started"] is not None
    assert store.get(job.id).status == IN_PROGRESS
    canceled_at = time.time()
    assert store.cancel(job.id).status == CANCELED

    def cancelled() -> float:
        at = note_of(server, "held", 11)["cancelled"]
        assert at is not None, "the model's call was not cancelled"
        return at
    assert eventually(cancelled, 10) - canceled_at < 1.0
    server.log_with(f"job {job.id} stopped: it was canceled")
    assert store.get(job.id).status == CANCELED and store.result(job.id) is None  # nothing stored over it


def test_a_result_over_the_limit_fails_the_job_naming_the_limit(server, store):
    small = submit_v1(store, "big", {"instances": [100]})
    large = submit_v1(store, "big", {"instances": [5000]})
    ended(store, small, COMPLETED, server)
    status, _, body = post_json_raw(server.http_port, "/v1/models/big:predict", {"instances": [100]})
    assert store.result(small.id) == StoredReply(200, {"content-type": "application/json"}, body)
    failed = ended(store, large, FAILED, server)
    assert "more than the server keeps (--max_job_result_bytes 4096); it was not stored" in failed.error
    assert failed.error.startswith("the job's result is ")
    reply = store.result(large.id)
    assert reply.status == 500 and json.loads(reply.body) == {"error": failed.error}


def test_a_callback_gets_the_status_document_and_is_tried_again_after_a_500(server, store, receiver):
    path = "/hooks/first-refused"
    receiver.answers[path] = [500]
    job = submit_v2(store, "echo", 21, callback_url=f"http://127.0.0.1:{receiver.port}{path}")
    done = ended(store, job, COMPLETED, server)
    posts = eventually(lambda: len(receiver.posts_to(path)) >= 2 and receiver.posts_to(path), 20)
    assert len(posts) == 2  # the 500 was tried again, the 200 was not
    for _, _, headers, body in posts:
        assert headers["content-type"] == "application/json"
        assert json.loads(body) == store.get(job.id).document() == done.document()
    assert json.loads(posts[0][3])["status"] == COMPLETED
    assert posts[1][0] - posts[0][0] >= 0.4  # after a pause


def test_a_failed_job_calls_back_too(server, store, receiver):
    path = "/hooks/failed"
    job = submit_v2(store, "broken", 22, callback_url=f"http://127.0.0.1:{receiver.port}{path}")
    ended(store, job, FAILED, server)
    posts = eventually(lambda: receiver.posts_to(path), 20)
    document = json.loads(posts[0][3])
    assert document["id"] == job.id and document["status"] == FAILED and "row 3 is bad" in document["error"]


def test_jobs_wait_below_synchronous_calls(server, store):
    """20 jobs of a model that runs one call at a time: a synchronous call arriving among them waits for at
    most the job execution under way."""
    jobs = [submit_v2(store, "single", tag) for tag in range(100, 120)]
    eventually(lambda: any(note["tag"] >= 100 for note in notes(server, "single")), 20)
    sent = time.time()
    status, _, body = synchronous(server, "single", v2_body(1000))
    assert status == 200, body
    mine = note_of(server, "single", 1000)
    overlapping = [note["tag"] for note in notes(server, "single")
                   if note["tag"] != 1000 and note["started"] < mine["started"]
                   and (note["ended"] or mine["started"]) > sent]
    assert len(overlapping) <= 1, overlapping  # the one running when it came, no other
    for job in jobs:  # the backlog ends before the next test
        ended(store, job, COMPLETED, server, timeout=60)


def test_a_job_submitted_through_the_api_runs_and_is_counted(server):
    port = server.http_port
    status, headers, doc = post_json(port, "/v2/models/echo/jobs", json.loads(v2_body(31)),
                                     {"x-request-id": "api-job-31"})
    assert status == 202, doc
    job_id = doc["id"]
    assert headers["location"] == f"/v2/jobs/{job_id}"

    def completed() -> Dict[str, Any]:
        got = json.loads(request(port, "GET", f"/v2/jobs/{job_id}")[2])
        assert got["status"] == COMPLETED, got
        return got
    assert eventually(completed, 20)["request_id"] == "api-job-31"
    code, result_headers, result = request(port, "GET", f"/v2/jobs/{job_id}/result")
    assert code == 200 and result_headers["content-type"] == "application/json"
    answer, synchronous_answer = json.loads(result), json.loads(synchronous(server, "echo", v2_body(31))[2])
    assert answer["id"] == "api-job-31" and {**answer, "id": None} == {**synchronous_answer, "id": None}
    samples = scrape(server)
    assert value(samples, "kserve_jobs_submitted_total", model_name="echo") >= 1
    assert value(samples, "kserve_jobs_finished_total", model_name="echo", status=COMPLETED) >= 1
    assert value(samples, "kserve_job_seconds_count", model_name="echo") >= 1
    assert value(samples, "kserve_job_attempts_count", model_name="echo") >= 1
    assert value(samples, "kserve_requests_total", model_name="echo", protocol="rest_v2", endpoint="job",
                 status="200") >= 1


# --- stopping, the file, retention ------------------------------------------------------------------------
def test_sigterm_finishes_a_job_within_the_grace_period_and_hands_back_one_that_would_not(start_server,
                                                                                       tmp_path):
    url = _store_url(tmp_path)
    server = start_server(MODELS, "--jobs_store", url, "--grace_period", "4", grpc=False)
    store = StoreClient(url)
    try:
        short = submit_v2(store, "echo", 41, seconds=1.5)
        held = submit_v2(store, "held", 42, hold=True)
        note_of(server, "echo", 41)
        note_of(server, "held", 42)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait_exit(30) == 0
        assert store.get(short.id).status == COMPLETED
        given_back = store.get(held.id)
        assert given_back.status == PENDING and store.result(held.id) is None
        assert "1 jobs still running after the" in server.log()
    finally:
        store.stop()


def test_a_server_that_gets_no_job_writes_no_file_and_finished_jobs_are_purged(start_server, tmp_path):
    url = _store_url(tmp_path)
    server = start_server(MODELS, "--jobs_store", url, "--job_retention_seconds", "1", grpc=False)
    assert synchronous(server, "echo", v2_body(1))[0] == 200
    time.sleep(0.5)  # the runner has looked for jobs a few times by now
    assert os.listdir(tmp_path) == []
    store = StoreClient(url)
    try:
        job = submit_v2(store, "echo", 51)  # makes the file: the runner finds it and claims the job
        ended(store, job, COMPLETED, server)
        eventually(lambda: store.get(job.id) is None, 15, message=lambda: server.log()[-3000:])
        server.log_with("purged 1 jobs that finished more than 1.0s ago")
    finally:
        store.stop()


def test_two_workers_share_the_file_and_run_each_job_once(start_server, tmp_path):
    url = _store_url(tmp_path)
    server = start_server(MODELS, "--jobs_store", url, "--workers", "2", grpc=False)
    store = StoreClient(url)
    try:
        jobs = [submit_v2(store, "echo", tag, seconds=0.05) for tag in range(200, 240)]
        for job in jobs:
            done = ended(store, job, COMPLETED, server, timeout=60)
            assert done.attempts == 1
            assert json.loads(store.result(job.id).body)["outputs"][0]["data"] == [int(done.request_id.split("-")[2])]
    finally:
        store.stop()


def spans_in(log: str) -> List[Dict[str, Any]]:
    """The spans OpenTelemetry's console exporter wrote into a server's log (one indented JSON object each)."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := log.find('{\n    "name": ', at)) >= 0:
        span, at = decoder.raw_decode(log, at)
        spans.append(span)
    return spans


def test_a_job_execution_span_is_linked_to_its_submit_span(start_server, tmp_path):
    server = start_server(MODELS, "--jobs_store", _store_url(tmp_path), grpc=False,
                          env={"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"})
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    status, _, doc = post_json(server.http_port, "/v2/models/echo/jobs", json.loads(v2_body(61)),
                               {"traceparent": f"00-{trace_id}-{parent_id}-01", "x-request-id": "traced-job-61"})
    assert status == 202, doc

    def submit_and_execution() -> Tuple[Dict[str, Any], Dict[str, Any]]:
        mine = [span for span in spans_in(server.log())
                if span["attributes"].get("kserve.request_id") == "traced-job-61" and span["kind"] == "SpanKind.SERVER"]
        by_endpoint = {span["attributes"]["kserve.endpoint"]: span for span in mine}
        assert {"job_submit", "job"} <= set(by_endpoint), sorted(by_endpoint)
        return by_endpoint["job_submit"], by_endpoint["job"]
    submit, execution = eventually(submit_and_execution, 30)
    assert (submit["context"]["trace_id"], submit["parent_id"]) == (f"0x{trace_id}", f"0x{parent_id}")
    assert execution["name"] == "rest_v2 job" and execution["parent_id"] is None  # a trace of its own
    assert execution["context"]["trace_id"] != submit["context"]["trace_id"]
    assert [link["context"]["span_id"] for link in execution["links"]] == [submit["context"]["span_id"]]
    assert execution["links"][0]["context"]["trace_id"] == f"0x{trace_id}"
    assert execution["attributes"]["kserve.model_name"] == "echo"
