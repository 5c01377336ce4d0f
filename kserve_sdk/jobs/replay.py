"""Run a job's request as its synchronous route would, and keep what the route would have answered.

A job is one call of the data plane, as a request is: it opens a :class:`~kserve_sdk.lifecycle.Call` (endpoint
``job``, so metrics count it apart), carries the submitting request's ``x-request-id`` (its log lines and latency
line name it), goes through the route function of handlers/inference.py, and waits at the background level of its
model's queue (below every synchronous call). An error becomes the route's ``{"error": ...}`` answer with the
route's status, except where the route's answer would only say "not now": a model not ready yet (loading, warming
up) is waited for, and a worker that is stopping or at ``--max_concurrent_requests`` hands the job back
(:class:`Postponed`). When tracing is on, the execution's span starts a trace of its own, linked to the submit's span.
"""
import asyncio
import json
from typing import Dict, Optional, Tuple

from tornado.httputil import HTTPHeaders

from .. import tracing
from ..dataplane import DataPlane
from ..errors import ModelNotReady, ServerBusy, ServerNotReady
from ..handlers.inference import call_v1, infer_v2
from ..handlers.responder import Reply, error_reply, header_text
from ..lifecycle import Call
from ..scheduling.scheduler import in_background
from .store import Job, JobRequest, StoredReply

#: The trace-context headers of the submit: the execution links to that span rather than continuing its trace.
TRACE_HEADERS = ("traceparent", "tracestate")
#: The first and the longest pause between looks at a model that is not ready.
FIRST_READY_POLL_S, LAST_READY_POLL_S = 0.05, 1.0
#: How long a job waits for its model to be ready; then it runs and keeps the route's 503 (a model that failed
#: its warm-up would otherwise hold a runner's slot for good).
NOT_READY_LIMIT_S = 300.0


class Postponed(Exception):
    """The job could not run now for a reason of this worker's (it is stopping, or at
    ``--max_concurrent_requests``): it goes back to pending, its attempt not counted."""


def route_of(request: JobRequest) -> str:
    """The synchronous route the job replays, as a log line names it."""
    if request.route == "v1":
        return f"POST /v1/models/{request.model}:predict"
    version = f"/versions/{request.version}" if request.version else ""
    return f"POST /v2/models/{request.model}{version}/infer"


async def replay(dataplane: DataPlane, job: Job, request: JobRequest) -> StoredReply:
    """The answer of ``request``'s synchronous route, run now in the background of its model's queue; a model
    not ready (loading, warming up, unhealthy) is waited for, where the route would answer 503. Postponed when
    this worker cannot run it now; CancelledError when it is cancelled (nothing is kept)."""
    loop = asyncio.get_running_loop()
    give_up, pause = loop.time() + NOT_READY_LIMIT_S, FIRST_READY_POLL_S
    while True:
        await _until_ready(dataplane, request.model, give_up)
        try:
            return await _replay_once(dataplane, job, request, final=loop.time() >= give_up)
        except _NotReady:  # it stopped being ready between the look and the call (or is being unloaded)
            await asyncio.sleep(pause)
            pause = min(pause * 2, LAST_READY_POLL_S)


async def _until_ready(dataplane: DataPlane, name: str, give_up: float) -> None:
    """Return once the model is ready, or unknown (the route answers that), or at ``give_up`` (loop time);
    Postponed when the server stops."""
    pause, loop = FIRST_READY_POLL_S, asyncio.get_running_loop()
    while loop.time() < give_up:
        if dataplane.draining:
            raise Postponed("the server is stopping")
        try:
            if await dataplane.model_ready(name):
                return
        except Exception:  # noqa: BLE001 - an unknown model, a failing health check: the route answers it
            return
        await asyncio.sleep(pause)
        pause = min(pause * 2, LAST_READY_POLL_S)


class _NotReady(Exception):
    pass


async def _replay_once(dataplane: DataPlane, job: Job, request: JobRequest, final: bool) -> StoredReply:
    headers = dict(request.headers)
    headers.setdefault("x-request-id", job.request_id)
    submit_context = {name: headers.pop(name) for name in TRACE_HEADERS if name in headers}
    call = dataplane.open_call("rest_v1" if request.route == "v1" else "rest_v2", "job", headers, request.model)
    if call.span is not None and submit_context:
        _link_submit(call, submit_context)
    where = f"job {job.id} ({route_of(request)})"
    background = in_background.set(True)
    try:
        code, stored = await _answer(dataplane, call, request, where, final)
    except (Postponed, _NotReady):
        call.close("503")
        raise
    except BaseException:  # cancelled: as a client that left
        call.close("499")
        raise
    finally:
        in_background.reset(background)
    call.close(str(code))
    return stored


async def _answer(dataplane: DataPlane, call: Call, request: JobRequest, where: str,
                  final: bool) -> Tuple[int, StoredReply]:
    """The route's status and reply, errors answered as the route answers them; a model not ready is waited
    for again (_NotReady) unless this is the ``final`` try."""
    try:
        return 200, _stored(await _run_route(dataplane, call, request))
    except (ServerBusy, ServerNotReady) as e:
        if isinstance(e, ServerBusy) or dataplane.draining:
            raise Postponed(str(e)) from None
        return _error(call, e, where)
    except ModelNotReady as e:
        if final:
            return _error(call, e, where)
        raise _NotReady() from None
    except Exception as e:  # noqa: BLE001 - every failure is answered (a header no answer can carry among them)
        return _error(call, e, where)


async def _run_route(dataplane: DataPlane, call: Call, request: JobRequest) -> Reply:
    http_headers = HTTPHeaders(request.headers)
    if request.route == "v1":
        return await call_v1(dataplane, "predict", request.model, call, request.body, http_headers)
    return await infer_v2(dataplane, request.model, request.version, call, request.body, http_headers)


def _stored(reply: Reply, status: int = 200) -> StoredReply:
    """A route's reply as it is kept: lowercase header names, ``content-type`` among them, values as text."""
    headers: Dict[str, str] = {name.lower(): header_text(name, value) for name, value in reply.headers.items()}
    headers["content-type"] = reply.content_type
    return StoredReply(status, headers, reply.body)


def _error(call: Call, exc: BaseException, where: str) -> Tuple[int, StoredReply]:
    status, reply = error_reply(call, exc, where)
    return status, _stored(reply, status)


def _link_submit(call: Call, submit_context: Dict[str, str]) -> None:
    """Link the execution's span to the submit's span named by its ``traceparent``."""
    from opentelemetry import propagate, trace

    spans = tracing.spans
    span = call.span
    if spans is None or span is None or not span.is_recording():
        return
    submitted = trace.get_current_span(propagate.extract(submit_context)).get_span_context()
    if submitted.is_valid:
        span.add_link(submitted, {"kserve.link": "job submit"})


def reply_error(reply: StoredReply) -> Optional[str]:
    """The error message of a failed reply: its ``{"error": ...}`` text, else its status and the start of its
    body; None for a reply that did not fail (status below 400)."""
    if reply.status < 400:
        return None
    try:
        doc = json.loads(reply.body)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, str):
            return error
        if isinstance(error, dict) and isinstance(error.get("message"), str):  # OpenAI's shape
            return error["message"]
    text = reply.body[:200].decode("utf-8", "replace").strip()
    return f"answered {reply.status}" + (f": {text}" if text else "")
