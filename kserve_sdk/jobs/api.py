"""Durable asynchronous jobs over REST: submit a model's inference request now, fetch its answer later.

- ``POST /v2/models/<m>[/versions/<v>]/jobs``: any body the model's v2 ``infer`` route takes (JSON, the binary
  extension, a CloudEvent); ``POST /v1/models/<m>/jobs``: a v1 ``predict`` body. Both answer ``202 Accepted``
  with ``{"id", "model", "status": "pending", "created"}`` and ``Location: /v2/jobs/<id>``, once the job is in
  the store. ``callback_url`` (query parameter, or the ``x-callback-url`` header) is called when the job ends.
- ``GET /v2/jobs/<id>``: the job's status document; ``DELETE`` cancels it.
- ``GET /v2/jobs/<id>/result``: exactly what the synchronous route answered (status, headers, body).
- ``POST /v2/jobs/<id>/retry``: a failed or canceled job, queued again.
- ``GET /v2/jobs?model=&status=&limit=&after=``: the jobs in the order they came, a page at a time.

A request is checked whole before anything is written: a bad one is answered 4xx naming what is wrong and the
store is left as it was. The routes answer 404 on a server started with ``--jobs_store none``.
"""
import re
from http import HTTPStatus
from typing import Any, Dict, Optional, Tuple

from tornado.httputil import HTTPHeaders

from ..errors import InvalidInput
from ..handlers.api import MODEL, VERSION, RestAPI
from ..handlers.base import JSON, BaseHandler
from ..handlers.cloudevents import decode_cloudevent
from ..handlers.inference import BINARY_HEADER
from ..handlers.responder import error_document
from ..protocol.infer_type import InferRequest
from ..protocol.rest.json_body import require_object
from ..protocol.rest_codec import decode_infer_request, loads_json, parse_json_length
from .service import JobsService, current
from .store import (
    CANCELED,
    FAILED,
    FINISHED,
    JOB_ID,
    PENDING,
    STATUSES,
    Job,
    JobRequest,
    JobsFull,
    JobStore,
    StoredReply,
)

#: A job id in a route: any path segment, so that a malformed one is answered 400 naming it (not 404).
JOB = r"(?P<job_id>[^/]+)"
#: The largest page ``GET /v2/jobs`` gives; its default.
MAX_LIMIT, DEFAULT_LIMIT = 1000, 100
DIGITS = re.compile(r"[0-9]{1,6}")
#: Request headers a job keeps, since they shape its answer: exact names, then name prefixes.
KEPT_HEADERS = frozenset({"content-type", BINARY_HEADER.lower(), "x-request-id", "traceparent", "tracestate"})
KEPT_PREFIXES = ("ce-", "x-kserve-")
#: Stored reply headers a result answer leaves out: those of the connection, and those naming the call answering
#: (its own ``x-request-id`` and ``traceparent``; the job's request id is in its document).
NOT_REPLAYED = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "server", "date",
                          "x-request-id", "traceparent"})
#: Seconds a client is asked to wait when the pending jobs are at their limit.
RETRY_AFTER_S = 1


# --- what the routes answer besides a job ---------------------------------------------------------------------
class JobsOff(Exception):
    """The server was started with ``--jobs_store none`` (404)."""

    http_status, grpc_code = HTTPStatus.NOT_FOUND, "NOT_FOUND"

    def __str__(self) -> str:
        return "jobs are off on this server (--jobs_store none)"


class UnknownJob(Exception):
    """No job has this id: never submitted, or purged after ``--job_retention_seconds`` (404)."""

    http_status, grpc_code = HTTPStatus.NOT_FOUND, "NOT_FOUND"

    def __init__(self, job_id: str):
        self.job_id = job_id

    def __str__(self) -> str:
        return f"job {self.job_id} does not exist (never submitted, or purged after --job_retention_seconds)"


class JobConflict(Exception):
    """The job's status does not allow what was asked (409), e.g. the result of a job still running."""

    http_status, grpc_code = HTTPStatus.CONFLICT, "FAILED_PRECONDITION"

    def __init__(self, job: Job, why: str):
        self.message = f"job {job.id} is {job.status}: {why}"

    def __str__(self) -> str:
        return self.message


class PendingJobsFull(Exception):
    """``--max_pending_jobs`` jobs are pending: a submission is refused (503 with ``Retry-After``)."""

    http_status, grpc_code = HTTPStatus.SERVICE_UNAVAILABLE, "UNAVAILABLE"
    retry_after = RETRY_AFTER_S

    def __init__(self, full: JobsFull):
        self.message = str(full)

    def __str__(self) -> str:
        return self.message


# --- checking a request before anything is written --------------------------------------------------------------
def checked_job_id(job_id: str) -> str:
    """``job_id`` when it is one (32 lowercase hexadecimal digits); else 400 naming it."""
    if JOB_ID.fullmatch(job_id) is None:
        raise InvalidInput(f"the job id {job_id!r} is malformed: a job id is 32 lowercase hexadecimal digits")
    return job_id


def check_v2_body(name: str, body: bytes, headers: HTTPHeaders) -> None:
    """Decode a v2 ``infer`` body as that route does, and forget it: InvalidInput (400) when it would be refused."""
    event = decode_cloudevent(body, headers)
    if event is None:
        json_length = parse_json_length(headers.get(BINARY_HEADER), len(body))
        decode_infer_request(InferRequest, body, json_length, name)
    elif not isinstance(event[0], bytes):  # JSON event data is a v2 request; other data goes to the model as is
        InferRequest.from_dict(event[0], name)


def check_v1_body(body: bytes, headers: HTTPHeaders) -> None:
    """A v1 ``predict`` body must be a JSON object or a CloudEvent: InvalidInput (400) otherwise."""
    if not body:
        raise InvalidInput("the request body is empty")
    if decode_cloudevent(body, headers) is None:
        require_object(loads_json(body), "a v1 predict body")


def checked_callback(handler: BaseHandler, jobs: JobsService) -> Optional[str]:
    """The job's ``callback_url`` (query parameter, else the ``x-callback-url`` header), or None; 400 when it is
    not an http(s) URL whose host ``--job_callback_hosts`` allows."""
    url = handler.get_query_argument("callback_url", None) or handler.request.headers.get("x-callback-url")
    if not url:
        return None
    refusal = jobs.allowed_callback(url)
    if refusal is not None:
        raise InvalidInput(refusal)
    return url


def kept_headers(headers: Dict[str, str]) -> Dict[str, str]:
    """The request headers (lowercase names, the call's ``x-request-id`` among them) a job keeps."""
    return {name: value for name, value in headers.items()
            if name in KEPT_HEADERS or name.startswith(KEPT_PREFIXES)}


def list_arguments(handler: BaseHandler) -> Tuple[Optional[str], Optional[str], int, Optional[str]]:
    """``(model, status, limit, after)`` of ``GET /v2/jobs``; 400 naming a bad one. Empty means not given."""
    model = handler.get_query_argument("model", None) or None
    status = handler.get_query_argument("status", None) or None
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"status {status!r} is not a job status: use one of {', '.join(STATUSES)}")
    text = handler.get_query_argument("limit", None) or None
    limit = DEFAULT_LIMIT if text is None else int(text) if DIGITS.fullmatch(text) else 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit {text!r} is not an integer from 1 to {MAX_LIMIT}")
    after = handler.get_query_argument("after", None) or None
    if after is not None and JOB_ID.fullmatch(after) is None:
        raise InvalidInput(f"after {after!r} is not a cursor: pass the 'next' of the previous page (a job id)")
    return model, status, limit, after


# --- the store ----------------------------------------------------------------------------------------------
def jobs_service() -> JobsService:
    """This worker's jobs service; JobsOff (404) when jobs are off."""
    jobs = current()
    if jobs is None:
        raise JobsOff()
    return jobs


async def known_job(jobs: JobsService, job_id: str) -> Tuple[JobStore, Job]:
    """The store and the job with this id; 400 for a malformed id, 404 for an unknown one."""
    checked_job_id(job_id)
    store = await jobs.store(create=False)  # None: no job was ever submitted
    job = None if store is None else await store.get(job_id)
    if store is None or job is None:
        raise UnknownJob(job_id)
    return store, job


def submitted(job: Job) -> Dict[str, Any]:
    """What a submission answers: the new job's id, model, status and creation time."""
    return {"id": job.id, "model": job.model, "status": job.status, "created": job.created}


# --- the routes ---------------------------------------------------------------------------------------------
class _SubmitHandler(BaseHandler):
    """What the two submit routes share: checks, then the job stored, the runners woken and 202 sent."""

    endpoint = "job_submit"
    route = "v2"

    def check_body(self, name: str) -> None:
        raise NotImplementedError

    async def submit(self, name: str, version: Optional[str]) -> None:
        jobs = jobs_service()
        # the infer route's 404 (no such model or version); a model not ready yet is fine
        self.dataplane.get_model_from_registry(name, version)
        callback_url = checked_callback(self, jobs)
        self.check_body(name)
        call = self.open_call()
        request = JobRequest(self.route, name, version, kept_headers(call.headers), self.request.body)
        store = await jobs.store()
        assert store is not None  # made when missing
        try:
            job = await store.submit(request, call.request_id, callback_url, jobs.options.max_pending)
        except JobsFull as full:
            raise PendingJobsFull(full) from None
        jobs.submitted(job)
        self.set_status(HTTPStatus.ACCEPTED)
        self.set_header("Location", f"/v2/jobs/{job.id}")
        self.send_json(submitted(job))


class SubmitV2Handler(_SubmitHandler):
    """``POST /v2/models/<m>[/versions/<v>]/jobs``: a v2 ``infer`` body, kept to run later."""

    def check_body(self, name: str) -> None:
        check_v2_body(name, self.request.body, self.request.headers)

    async def post(self, name: str, version: Optional[str] = None) -> None:
        await self.submit(name, version)


class SubmitV1Handler(_SubmitHandler):
    """``POST /v1/models/<m>/jobs``: a v1 ``predict`` body, kept to run later."""

    protocol, route = "rest_v1", "v1"

    def check_body(self, name: str) -> None:
        check_v1_body(self.request.body, self.request.headers)

    async def post(self, name: str) -> None:
        await self.submit(name, None)


class JobHandler(BaseHandler):
    """``GET /v2/jobs/<id>``: the job's status document; ``DELETE``: cancel it (a running job's model call is
    cancelled by its worker)."""

    endpoint = "job"

    async def get(self, job_id: str) -> None:
        self.send_json((await known_job(jobs_service(), job_id))[1].document())

    async def delete(self, job_id: str) -> None:
        jobs = jobs_service()
        store, job = await known_job(jobs, job_id)
        if job.status in FINISHED:
            raise JobConflict(job, "only a pending or in-progress job can be canceled")
        job = await store.cancel(job.id) or job
        if job.status != CANCELED:  # it finished meanwhile
            raise JobConflict(job, "only a pending or in-progress job can be canceled")
        jobs.canceled(job)
        self.send_json(job.document())


class JobResultHandler(BaseHandler):
    """``GET /v2/jobs/<id>/result``: what the synchronous route answered, exactly."""

    endpoint = "job_result"

    async def get(self, job_id: str) -> None:
        store, job = await known_job(jobs_service(), job_id)
        if job.status not in FINISHED:
            raise JobConflict(job, "its result is not ready")
        if job.status == CANCELED:
            raise JobConflict(job, "it has no result")
        reply = await store.result(job.id)
        if reply is None and job.status == FAILED:  # no answer was kept (its worker stopped each time): its error
            reply = StoredReply(HTTPStatus.INTERNAL_SERVER_ERROR, {}, error_document(500, job.error or "failed"))
        if reply is None:  # purged since
            raise UnknownJob(job_id)
        self.set_status(reply.status)
        headers = {name: value for name, value in reply.headers.items() if name.lower() not in NOT_REPLAYED}
        content_type = headers.pop("content-type", None) or headers.pop("Content-Type", JSON)
        self.send_body(reply.body, content_type, headers)


class JobRetryHandler(BaseHandler):
    """``POST /v2/jobs/<id>/retry``: a failed or canceled job, pending again with its attempts cleared."""

    endpoint = "job_retry"

    async def post(self, job_id: str) -> None:
        jobs = jobs_service()
        store, job = await known_job(jobs, job_id)
        if job.status not in (FAILED, CANCELED):
            raise JobConflict(job, "only a failed or canceled job can be retried")
        job = await store.retry(job.id) or job
        if job.status != PENDING:  # changed meanwhile
            raise JobConflict(job, "only a failed or canceled job can be retried")
        jobs.submitted(job)
        self.send_json(job.document())


class JobListHandler(BaseHandler):
    """``GET /v2/jobs?model=&status=&limit=&after=``: ``{"jobs": [documents], "next": cursor or null}``."""

    endpoint = "jobs"

    async def get(self) -> None:
        jobs = jobs_service()
        model, status, limit, after = list_arguments(self)
        store = await jobs.store(create=False)  # None: no job was ever submitted
        found, cursor = ([], None) if store is None else await store.list(model, status, limit, after)
        self.send_json({"jobs": [job.document() for job in found], "next": cursor})


#: The jobs API.
API = RestAPI("jobs", [
    (rf"/v2/models/{MODEL}{VERSION}/jobs", SubmitV2Handler),
    (rf"/v1/models/{MODEL}/jobs", SubmitV1Handler),
    (r"/v2/jobs", JobListHandler),
    (rf"/v2/jobs/{JOB}", JobHandler),
    (rf"/v2/jobs/{JOB}/result", JobResultHandler),
    (rf"/v2/jobs/{JOB}/retry", JobRetryHandler),
])
