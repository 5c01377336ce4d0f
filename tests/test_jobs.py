"""Durable asynchronous jobs over REST (kserve_sdk/jobs/api.py), on a real server with its SQLite store in a
temporary folder: a job's answer is the synchronous route's, byte for byte (v1, v2 JSON and binary, CloudEvents,
errors); cancel, retry, the listing; a job whose worker was killed; every bad input answered 4xx/503 naming the
problem with nothing written to the store; jobs off; the OpenAPI document; the client loop of docs/jobs.md.

The server runs one job at a time (``--job_concurrency 1``), so a held job keeps the next ones pending, and
allows 3 pending jobs (``--max_pending_jobs 3``). Every test leaves no job pending or running.
"""
import json
import os
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

import pytest

from helpers import ROOT, binary_body, check_response, eventually, request, run_python

MAX_BODY = 65536
JOBS_OFF = "jobs are off on this server (--jobs_store none)"
FINISHED = ("completed", "failed", "canceled")
DEADLINE_S = 20.0


class Receiver(ThreadingHTTPServer):
    """Takes completion callbacks: the JSON documents POSTed to it, by path."""

    def __init__(self) -> None:
        self.received: List[Tuple[str, Dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append((self.path, json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def receiver():
    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.shutdown()
    receiver.server_close()


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory, receiver):
    store = tmp_path_factory.mktemp("jobs") / "j.db"
    return start_server("tests/models/job_models.py", "--jobs_store", f"sqlite:///{store}", "--job_concurrency", "1",
                        "--max_pending_jobs", "3", "--max_body_size", str(MAX_BODY),
                        "--job_callback_hosts", receiver.host, grpc=False)


# --- talking to the server ------------------------------------------------------------------------------------
def call(server, method: str, path: str, body: Optional[bytes] = None,
         headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], bytes]:
    return request(server.http_port, method, path, body, headers)


def as_json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


JSON_HEADERS = {"Content-Type": "application/json"}


def submit(server, path: str, body: bytes, headers: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Submit a job; it must be accepted as the API promises."""
    status, answer_headers, answer = call(server, "POST", path, body, {**JSON_HEADERS, **(headers or {})})
    assert status == 202, answer
    doc = json.loads(answer)
    assert set(doc) == {"id", "model", "status", "created"} and doc["status"] == "pending", doc
    assert answer_headers["location"] == f"/v2/jobs/{doc['id']}"
    return doc


def job(server, job_id: str) -> Dict[str, Any]:
    status, _, body = call(server, "GET", f"/v2/jobs/{job_id}")
    assert status == 200, body
    return json.loads(body)


def finished(server, job_id: str) -> Dict[str, Any]:
    """The job's document once it has finished (within the deadline)."""
    def done() -> Dict[str, Any]:
        doc = job(server, job_id)
        assert doc["status"] in FINISHED, doc
        return doc
    return eventually(done, DEADLINE_S, message=lambda: server.log()[-3000:])


def in_status(server, job_id: str, status: str) -> Dict[str, Any]:
    def there() -> Dict[str, Any]:
        doc = job(server, job_id)
        assert doc["status"] == status, doc
        return doc
    return eventually(there, DEADLINE_S)


def ledger(server, asked: str) -> List[Any]:
    status, _, body = call(server, "POST", "/v1/models/ledger:predict", as_json({"instances": [asked]}), JSON_HEADERS)
    assert status == 200, body
    return json.loads(body)["predictions"]


def listed(server) -> List[Dict[str, Any]]:
    """Every job in the store, in submission order."""
    found: List[Dict[str, Any]] = []
    after = ""
    for _ in range(100):
        status, _, body = call(server, "GET", f"/v2/jobs?limit=1000{after}")
        assert status == 200, body
        page = json.loads(body)
        found += page["jobs"]
        if page["next"] is None:
            return found
        after = f"&after={page['next']}"
    raise AssertionError("more than 100 pages of jobs")


def all_jobs(server) -> List[Dict[str, Any]]:
    """Every job in the store, once none is pending or running."""
    def settled() -> Tuple[List[Dict[str, Any]]]:
        found = listed(server)
        assert all(doc["status"] in FINISHED for doc in found), found
        return (found,)
    return eventually(settled, DEADLINE_S)[0]


def v2_doc(*values: float, **parameters: Any) -> Dict[str, Any]:
    doc: Dict[str, Any] = {"id": "doc-1", "inputs": [
        {"name": "INPUT0", "shape": [1, len(values)], "datatype": "FP32", "data": list(values)}]}
    if parameters:
        doc["parameters"] = parameters
    return doc


def tagged(tag: int, hold: bool = False) -> bytes:
    doc: Dict[str, Any] = {"inputs": [{"name": "TAG", "shape": [1], "datatype": "INT64", "data": [tag]}]}
    if hold:
        doc["parameters"] = {"hold": True}
    return as_json(doc)


def same_answer(job_answer: Tuple[int, Dict[str, str], bytes], sync_answer: Tuple[int, Dict[str, str], bytes]):
    (status, headers, body), (sync_status, sync_headers, sync_body) = job_answer, sync_answer
    assert status == sync_status, (body, sync_body)
    assert headers["content-type"] == sync_headers["content-type"]
    assert headers.get("inference-header-content-length") == sync_headers.get("inference-header-content-length")
    assert body == sync_body


def error_of(answer: Tuple[int, Dict[str, str], bytes]) -> str:
    status, headers, body = answer
    assert headers["content-type"].startswith("application/json"), headers
    doc = json.loads(body)
    assert set(doc) == {"error"} and isinstance(doc["error"], str), doc
    return doc["error"]


# --- a job's answer is the synchronous one ----------------------------------------------------------------------
@pytest.mark.parametrize("submit_path,infer_path", [
    ("/v2/models/adder/jobs", "/v2/models/adder/infer"),
    ("/v2/models/adder/versions/1/jobs", "/v2/models/adder/versions/1/infer"),
])
def test_v2_json_job_answers_what_infer_answers(server, submit_path, infer_path):
    body = as_json(v2_doc(1.5, 2, 3))
    accepted = submit(server, submit_path, body)
    assert accepted["model"] == "adder"
    done = finished(server, accepted["id"])
    assert done["status"] == "completed" and done["attempts"] == 1, done
    assert done["created"] <= done["started"] <= done["finished"]
    answer = call(server, "GET", f"/v2/jobs/{accepted['id']}/result")
    same_answer(answer, call(server, "POST", infer_path, body, JSON_HEADERS))
    assert json.loads(answer[2])["outputs"][0]["data"] == [2.5, 3, 4]


def test_v2_binary_job_answers_what_infer_answers(server):
    tensor = {"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}
    header = {"id": "bin", "parameters": {"binary_data_output": True}, "inputs": [tensor]}
    body, headers = binary_body(header, bytes.fromhex("0000803f00000040"))  # 1.0, 2.0
    accepted = submit(server, "/v2/models/adder/jobs", body, headers)
    assert finished(server, accepted["id"])["status"] == "completed"
    answer = call(server, "GET", f"/v2/jobs/{accepted['id']}/result")
    same_answer(answer, call(server, "POST", "/v2/models/adder/infer", body, {**JSON_HEADERS, **headers}))
    assert answer[1]["content-type"] == "application/octet-stream"
    assert answer[2].endswith(bytes.fromhex("0000004000004040"))  # 2.0, 3.0


def test_v1_job_answers_what_predict_answers(server):
    body = as_json({"instances": [1, 2, 41]})
    accepted = submit(server, "/v1/models/adder_v1/jobs", body)
    assert finished(server, accepted["id"])["status"] == "completed"
    answer = call(server, "GET", f"/v2/jobs/{accepted['id']}/result")
    same_answer(answer, call(server, "POST", "/v1/models/adder_v1:predict", body, JSON_HEADERS))
    assert json.loads(answer[2]) == {"predictions": [2, 3, 42]}


def test_a_cloudevent_job_answers_what_predict_answers(server):
    body = as_json({"instances": [1, 2]})
    event = {"ce-specversion": "1.0", "ce-id": "event-1", "ce-source": "tests", "ce-type": "test.request"}
    accepted = submit(server, "/v1/models/adder_v1/jobs", body, event)
    assert finished(server, accepted["id"])["status"] == "completed"
    status, headers, answer = call(server, "GET", f"/v2/jobs/{accepted['id']}/result")
    sync_status, sync_headers, sync_answer = call(server, "POST", "/v1/models/adder_v1:predict", body,
                                                  {**JSON_HEADERS, **event})
    assert (status, answer) == (sync_status, sync_answer) == (200, b'{"predictions":[2,3]}')
    for name in ("content-type", "ce-specversion", "ce-type", "ce-source"):
        assert headers[name] == sync_headers[name], name
    assert headers["ce-id"] != "event-1"  # a response event of its own, as the route gives


def test_the_request_id_is_the_jobs_given_or_minted(server):
    status, headers, body = call(server, "POST", "/v2/models/adder/jobs", as_json(v2_doc(1)),
                                 {**JSON_HEADERS, "x-request-id": "my-own-id"})
    assert status == 202 and headers["x-request-id"] == "my-own-id"
    assert finished(server, json.loads(body)["id"])["request_id"] == "my-own-id"
    minted = call(server, "POST", "/v2/models/adder/jobs", as_json(v2_doc(1)), JSON_HEADERS)
    assert minted[1]["x-request-id"]
    assert finished(server, json.loads(minted[2])["id"])["request_id"] == minted[1]["x-request-id"]


def test_an_allowed_callback_url_is_kept_and_called_when_the_job_ends(server, receiver):
    from_query = submit(server, f"/v2/models/adder/jobs?callback_url=http://{receiver.host}/query",
                        as_json(v2_doc(1)), {"x-callback-url": f"http://{receiver.host}/header"})
    from_header = submit(server, "/v1/models/adder_v1/jobs", as_json({"instances": [1]}),
                         {"x-callback-url": f"http://{receiver.host}/header"})
    assert finished(server, from_query["id"])["callback_url"] == f"http://{receiver.host}/query"
    assert finished(server, from_header["id"])["callback_url"] == f"http://{receiver.host}/header"
    eventually(lambda: len(receiver.received) == 2, DEADLINE_S)
    called = {doc["id"]: (path, doc["status"]) for path, doc in receiver.received}
    assert called == {from_query["id"]: ("/query", "completed"), from_header["id"]: ("/header", "completed")}


def test_a_model_error_fails_the_job_and_its_result_is_the_routes_500(server):
    body = as_json(v2_doc(1))
    accepted = submit(server, "/v2/models/broken/jobs", body)
    done = finished(server, accepted["id"])
    assert done["status"] == "failed", done
    assert "RuntimeError : broken on purpose (model 'broken')" in done["error"], done
    answer = call(server, "GET", f"/v2/jobs/{accepted['id']}/result")
    assert answer[0] == 500
    same_answer(answer, call(server, "POST", "/v2/models/broken/infer", body, JSON_HEADERS))


def test_a_model_not_ready_yet_takes_jobs_that_run_once_it_is(server):
    ledger(server, "sleep")
    try:
        assert call(server, "POST", "/v2/models/sleepy/infer", as_json(v2_doc(1)), JSON_HEADERS)[0] == 503
        accepted = submit(server, "/v2/models/sleepy/jobs", as_json(v2_doc(1)))
        time.sleep(0.5)  # a runner that would take it now would fail it
        assert job(server, accepted["id"])["status"] in ("pending", "in_progress")
    finally:
        ledger(server, "wake")
    assert finished(server, accepted["id"])["status"] == "completed"


# --- retry and cancel ---------------------------------------------------------------------------------------------
def test_retry_queues_a_failed_job_again(server):
    accepted = submit(server, "/v2/models/flaky/jobs", tagged(5))
    failed = finished(server, accepted["id"])
    assert failed["status"] == "failed" and "tag 5 fails on its first try" in failed["error"], failed
    status, _, body = call(server, "POST", f"/v2/jobs/{accepted['id']}/retry")
    assert status == 200, body
    again = json.loads(body)
    assert again["status"] == "pending" and again["attempts"] == 0 and "error" not in again, again
    done = finished(server, accepted["id"])
    assert done["status"] == "completed" and done["attempts"] == 1, done
    answer = call(server, "GET", f"/v2/jobs/{accepted['id']}/result")
    assert answer[0] == 200 and json.loads(answer[2])["outputs"][0]["data"] == [6]


def held_job(server, tag: int) -> Dict[str, Any]:
    """A job of the held model, running (its call waits for the ledger's release)."""
    accepted = submit(server, "/v2/models/held/jobs", tagged(tag, hold=True))
    eventually(lambda: tag in ledger(server, "runs"), DEADLINE_S)
    assert job(server, accepted["id"])["status"] == "in_progress"
    return accepted


def test_a_canceled_pending_job_never_runs(server):
    running = held_job(server, 201)
    try:
        waiting = submit(server, "/v2/models/held/jobs", tagged(202))
        assert job(server, waiting["id"])["status"] == "pending"
        not_ready = call(server, "GET", f"/v2/jobs/{waiting['id']}/result")
        assert not_ready[0] == 409
        assert error_of(not_ready) == f"job {waiting['id']} is pending: its result is not ready"
        status, _, body = call(server, "DELETE", f"/v2/jobs/{waiting['id']}")
        assert status == 200, body
        canceled = json.loads(body)
        assert canceled["status"] == "canceled" and canceled["finished"] >= canceled["created"], canceled
    finally:
        ledger(server, "release")
    assert finished(server, running["id"])["status"] == "completed"
    later = submit(server, "/v2/models/held/jobs", tagged(203))  # claimed after 202 would have been (oldest first)
    assert finished(server, later["id"])["status"] == "completed"
    assert 202 not in ledger(server, "runs")
    assert job(server, waiting["id"])["status"] == "canceled"
    no_result = call(server, "GET", f"/v2/jobs/{waiting['id']}/result")
    assert no_result[0] == 409 and error_of(no_result) == f"job {waiting['id']} is canceled: it has no result"
    # a canceled job can be retried: it runs then
    assert call(server, "POST", f"/v2/jobs/{waiting['id']}/retry")[0] == 200
    assert finished(server, waiting["id"])["status"] == "completed"
    assert 202 in ledger(server, "runs")


def test_canceling_a_running_job_cancels_its_model_call_within_a_second(server):
    running = held_job(server, 301)
    try:
        asked = time.monotonic()
        status, _, body = call(server, "DELETE", f"/v2/jobs/{running['id']}")
        assert status == 200 and json.loads(body)["status"] == "canceled", body
        cancelled = eventually(lambda: [at for tag, at in ledger(server, "cancelled") if tag == 301], 5.0)
        assert cancelled[0] - asked < 1.0, f"the model's call was cancelled {cancelled[0] - asked:.2f} s after"
    finally:
        ledger(server, "release")
    assert job(server, running["id"])["status"] == "canceled"
    assert call(server, "GET", f"/v2/jobs/{running['id']}/result")[0] == 409


def test_a_job_whose_worker_died_each_time_fails_and_its_result_is_that_error(start_server, tmp_path):
    flags = ("--jobs_store", f"sqlite:///{tmp_path / 'j.db'}", "--job_lease_seconds", "1", "--job_max_attempts", "1")
    first = start_server("tests/models/job_models.py", *flags, grpc=False)
    accepted = submit(first, "/v2/models/held/jobs", tagged(501, hold=True))
    eventually(lambda: 501 in ledger(first, "runs"), DEADLINE_S)
    first.stop(signal.SIGKILL)
    second = start_server("tests/models/job_models.py", *flags, grpc=False)
    try:
        done = finished(second, accepted["id"])  # once its lease has run out
        assert done["status"] == "failed" and done["error"] == "its worker stopped during each of its 1 attempts"
        answer = call(second, "GET", f"/v2/jobs/{accepted['id']}/result")
        assert answer[0] == 500 and error_of(answer) == done["error"]
        assert 501 not in ledger(second, "runs")
    finally:
        second.stop()


def test_what_a_jobs_status_does_not_allow_is_409_naming_it(server):
    accepted = submit(server, "/v2/models/adder/jobs", as_json(v2_doc(1)))
    assert finished(server, accepted["id"])["status"] == "completed"
    job_id = accepted["id"]
    cancel = call(server, "DELETE", f"/v2/jobs/{job_id}")
    assert cancel[0] == 409
    assert error_of(cancel) == f"job {job_id} is completed: only a pending or in-progress job can be canceled"
    retry = call(server, "POST", f"/v2/jobs/{job_id}/retry")
    assert retry[0] == 409
    assert error_of(retry) == f"job {job_id} is completed: only a failed or canceled job can be retried"
    assert job(server, job_id)["status"] == "completed"


# --- the listing ----------------------------------------------------------------------------------------------------
def test_the_listing_filters_and_pages_in_submission_order(server):
    ids = [submit(server, "/v2/models/pager/jobs", as_json(v2_doc(n)))["id"] for n in range(5)]
    for job_id in ids:
        finished(server, job_id)
    pages, after = [], ""
    for _ in range(5):
        status, _, body = call(server, "GET", f"/v2/jobs?model=pager&limit=2{after}")
        assert status == 200, body
        page = json.loads(body)
        pages.append([doc["id"] for doc in page["jobs"]])
        if page["next"] is None:
            break
        assert page["next"] == page["jobs"][-1]["id"]
        after = f"&after={page['next']}"
    assert pages == [ids[:2], ids[2:4], ids[4:]]
    completed = json.loads(call(server, "GET", "/v2/jobs?model=pager&status=completed")[2])
    assert [doc["id"] for doc in completed["jobs"]] == ids and completed["next"] is None
    assert all(doc["model"] == "pager" for doc in completed["jobs"])
    assert json.loads(call(server, "GET", "/v2/jobs?model=pager&status=failed")[2]) == {"jobs": [], "next": None}
    everything = json.loads(call(server, "GET", "/v2/jobs")[2])["jobs"]
    assert [doc["id"] for doc in everything if doc["model"] == "pager"] == ids


# --- bad input: 4xx naming the problem, nothing written -------------------------------------------------------------
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"
MALFORMED = "the job id {!r} is malformed: a job id is 32 lowercase hexadecimal digits"
BAD_INPUT = [
    # (id, method, path, body, headers, status, message)
    ("malformed-id", "GET", "/v2/jobs/xyz", None, {}, 400, MALFORMED.format("xyz")),
    ("uppercase-id", "GET", f"/v2/jobs/{UNKNOWN_ID.upper()}", None, {}, 400, MALFORMED.format(UNKNOWN_ID.upper())),
    ("malformed-id-result", "GET", "/v2/jobs/12ab/result", None, {}, 400, MALFORMED.format("12ab")),
    ("malformed-id-cancel", "DELETE", "/v2/jobs/not-a-job", None, {}, 400, MALFORMED.format("not-a-job")),
    ("malformed-id-retry", "POST", "/v2/jobs/g123/retry", None, {}, 400, MALFORMED.format("g123")),
    ("unknown-id", "GET", f"/v2/jobs/{UNKNOWN_ID}", None, {}, 404, f"job {UNKNOWN_ID} does not exist"),
    ("unknown-id-result", "GET", f"/v2/jobs/{UNKNOWN_ID}/result", None, {}, 404, f"job {UNKNOWN_ID} does not exist"),
    ("unknown-id-cancel", "DELETE", f"/v2/jobs/{UNKNOWN_ID}", None, {}, 404, f"job {UNKNOWN_ID} does not exist"),
    ("unknown-id-retry", "POST", f"/v2/jobs/{UNKNOWN_ID}/retry", None, {}, 404, f"job {UNKNOWN_ID} does not exist"),
    ("unknown-status", "GET", "/v2/jobs?status=done", None, {}, 400,
     "status 'done' is not a job status: use one of pending, in_progress, completed, failed, canceled"),
    ("negative-limit", "GET", "/v2/jobs?limit=-1", None, {}, 400, "limit '-1' is not an integer from 1 to 1000"),
    ("zero-limit", "GET", "/v2/jobs?limit=0", None, {}, 400, "limit '0' is not an integer from 1 to 1000"),
    ("huge-limit", "GET", "/v2/jobs?limit=1001", None, {}, 400, "limit '1001' is not an integer from 1 to 1000"),
    ("word-limit", "GET", "/v2/jobs?limit=ten", None, {}, 400, "limit 'ten' is not an integer from 1 to 1000"),
    ("bad-cursor", "GET", "/v2/jobs?after=page2", None, {}, 400,
     "after 'page2' is not a cursor: pass the 'next' of the previous page (a job id)"),
    ("callback-host", "POST", "/v2/models/adder/jobs?callback_url=http://169.254.169.254/latest", as_json(v2_doc(1)),
     {}, 400, "169.254.169.254:80 is not among the hosts this server may call back (--job_callback_hosts)"),
    ("callback-header", "POST", "/v1/models/adder_v1/jobs", as_json({"instances": [1]}),
     {"x-callback-url": "http://127.0.0.1:8/x"}, 400,
     "127.0.0.1:8 is not among the hosts this server may call back (--job_callback_hosts)"),
    ("callback-scheme", "POST", "/v2/models/adder/jobs?callback_url=file:///etc/passwd", as_json(v2_doc(1)), {}, 400,
     "must be an http:// or https:// URL"),
    ("v1-not-an-object", "POST", "/v1/models/adder_v1/jobs", b"[1, 2]", {}, 400,
     "a v1 predict body must be a JSON object, got list"),
    ("v1-empty", "POST", "/v1/models/adder_v1/jobs", b"", {}, 400, "the request body is empty"),
    ("unknown-version", "POST", "/v2/models/adder/versions/7/jobs", as_json(v2_doc(1)), {}, 404,
     "Model 'adder' has no version '7'; versions served: 1."),
    ("over-max-body-size", "POST", "/v2/models/adder/jobs", b" " * (MAX_BODY + 1), {}, 413,
     f"the request body of {MAX_BODY + 1} bytes is larger than the {MAX_BODY} bytes this server accepts "
     "(--max_body_size)"),
]


@pytest.mark.parametrize("method,path,body,headers,status,message", [case[1:] for case in BAD_INPUT],
                         ids=[case[0] for case in BAD_INPUT])
def test_bad_input_is_answered_naming_it_and_writes_nothing(server, method, path, body, headers, status, message):
    before = all_jobs(server)
    answer = call(server, method, path, body, {**JSON_HEADERS, **headers})
    assert answer[0] == status, answer[2]
    assert message in error_of(answer)
    assert all_jobs(server) == before


# The same bodies on the infer route and the jobs route: the same status and message, and no job.
ROUTE_CHECKS = [
    ("v2-not-json", "/v2/models/adder", b'{"inputs": [', {}),
    ("v2-no-inputs", "/v2/models/adder", b'{"id": "x"}', {}),
    ("v2-bad-datatype", "/v2/models/adder", b'{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP33", '
     b'"data": [1]}]}', {}),
    ("v2-binary-length", "/v2/models/adder", b'{"inputs": []}', {"Inference-Header-Content-Length": "999"}),
    ("v2-bad-cloudevent", "/v2/models/adder", as_json(v2_doc(1)), {"ce-specversion": "1.0"}),
    ("v2-unknown-model", "/v2/models/nope", as_json(v2_doc(1)), {}),
    ("v1-not-json", "/v1/models/adder_v1", b"{nope", {}),
    ("v1-unknown-model", "/v1/models/nope", as_json({"instances": [1]}), {}),
]


@pytest.mark.parametrize("model_path,body,headers", [case[1:] for case in ROUTE_CHECKS],
                         ids=[case[0] for case in ROUTE_CHECKS])
def test_a_body_the_route_refuses_is_refused_alike_and_writes_nothing(server, model_path, body, headers):
    sync_path = model_path + (":predict" if model_path.startswith("/v1/") else "/infer")
    sync = call(server, "POST", sync_path, body, {**JSON_HEADERS, **headers})
    assert sync[0] in (400, 404), sync[2]
    before = all_jobs(server)
    answer = call(server, "POST", model_path + "/jobs", body, {**JSON_HEADERS, **headers})
    assert answer[0] == sync[0], answer[2]
    assert error_of(answer) == error_of(sync)
    assert all_jobs(server) == before


def test_a_full_pending_queue_is_503_with_retry_after_and_writes_nothing(server):
    running = held_job(server, 401)
    waiting = []
    try:
        waiting = [submit(server, "/v2/models/held/jobs", tagged(402 + n))["id"] for n in range(3)]
        listed = json.loads(call(server, "GET", "/v2/jobs?status=pending")[2])["jobs"]
        assert [doc["id"] for doc in listed] == waiting
        status, headers, body = call(server, "POST", "/v2/models/held/jobs", tagged(409), JSON_HEADERS)
        assert status == 503 and headers["retry-after"] == "1", body
        assert error_of((status, headers, body)) == "3 jobs are pending, the server's --max_pending_jobs; retry later"
        assert json.loads(call(server, "GET", "/v2/jobs?status=pending")[2])["jobs"] == listed
    finally:
        for job_id in waiting:
            call(server, "DELETE", f"/v2/jobs/{job_id}")
        ledger(server, "release")
    assert finished(server, running["id"])["status"] == "completed"
    assert 409 not in ledger(server, "runs")


# --- the OpenAPI document -------------------------------------------------------------------------------------------
def test_the_openapi_document_describes_the_job_routes_and_their_answers(server):
    status, _, body = call(server, "GET", "/openapi.json")
    document = json.loads(body)
    paths = document["paths"]
    for path, method in [("/v2/models/{model_name}/jobs", "post"),
                         ("/v2/models/{model_name}/versions/{model_version}/jobs", "post"),
                         ("/v1/models/{model_name}/jobs", "post"), ("/v2/jobs", "get"),
                         ("/v2/jobs/{job_id}", "get"), ("/v2/jobs/{job_id}", "delete"),
                         ("/v2/jobs/{job_id}/result", "get"), ("/v2/jobs/{job_id}/retry", "post")]:
        assert method in paths.get(path, {}), (method, path)
    answer = call(server, "POST", "/v2/models/adder/jobs", as_json(v2_doc(1)), JSON_HEADERS)
    check_response(document, "/v2/models/{model_name}/jobs", "post", *answer)
    job_id = json.loads(answer[2])["id"]
    finished(server, job_id)
    check_response(document, "/v2/jobs/{job_id}", "get", *call(server, "GET", f"/v2/jobs/{job_id}"))
    check_response(document, "/v2/jobs/{job_id}/result", "get", *call(server, "GET", f"/v2/jobs/{job_id}/result"))
    check_response(document, "/v2/jobs", "get", *call(server, "GET", "/v2/jobs?limit=2"))
    check_response(document, "/v2/jobs/{job_id}", "delete", *call(server, "DELETE", f"/v2/jobs/{job_id}"))
    check_response(document, "/v2/jobs/{job_id}/retry", "post", *call(server, "POST", "/v2/jobs/nope/retry"))
    v1 = call(server, "POST", "/v1/models/adder_v1/jobs", as_json({"instances": [1]}), JSON_HEADERS)
    check_response(document, "/v1/models/{model_name}/jobs", "post", *v1)
    finished(server, json.loads(v1[2])["id"])


# --- the client of docs/jobs.md ---------------------------------------------------------------------------------
def test_the_python_client_of_the_jobs_page_runs(server):
    with open(os.path.join(ROOT, "docs", "jobs.md")) as f:
        blocks = re.findall(r"^```python\n(.*?)^```", f.read(), re.M | re.S)
    assert len(blocks) == 1
    out = run_python(blocks[0].replace("http://localhost:8080", server.url))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].strip() == "completed", out.stdout
    assert out.stdout.splitlines()[1].startswith("200 ["), out.stdout


# --- jobs off -------------------------------------------------------------------------------------------------------
def test_with_jobs_off_every_job_route_is_404_saying_so(start_server):
    off = start_server("tests/models/job_models.py", "--jobs_store", "none", grpc=False)
    for method, path, body in [("POST", "/v2/models/adder/jobs", as_json(v2_doc(1))),
                               ("POST", "/v2/models/adder/versions/1/jobs", as_json(v2_doc(1))),
                               ("POST", "/v1/models/adder_v1/jobs", as_json({"instances": [1]})),
                               ("GET", "/v2/jobs", None), ("GET", f"/v2/jobs/{UNKNOWN_ID}", None),
                               ("GET", f"/v2/jobs/{UNKNOWN_ID}/result", None),
                               ("DELETE", f"/v2/jobs/{UNKNOWN_ID}", None),
                               ("POST", f"/v2/jobs/{UNKNOWN_ID}/retry", None)]:
        answer = call(off, method, path, body, JSON_HEADERS)
        assert answer[0] == 404 and error_of(answer) == JOBS_OFF, (method, path, answer)
    assert call(off, "POST", "/v2/models/adder/infer", as_json(v2_doc(1)), JSON_HEADERS)[0] == 200
