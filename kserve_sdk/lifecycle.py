"""The life of one call, written once for every protocol.

A protocol adapter (REST v1 and v2, Server-Sent Events, CloudEvents, gRPC unary and streaming) opens a
:class:`Call` when a request arrives and closes it when its answer has gone out. Everything a call goes
through apart from its wire format happens here:

- its request id: the client's ``x-request-id`` (up to 256 characters), or one minted for it, which every
  answer carries (errors included);
- the in-flight gauge while it runs, then one count in ``kserve_requests_total`` and the duration
  histogram, with the status the adapter put on the wire;
- a :class:`Timings` record handed down to the model's stages and the batcher, which add their
  durations, their wait for a model thread or a batch, and their executions; the data plane turns it
  into Triton statistics, KServe's stage histograms and the latency line (:func:`model_call_finished`);
- cancellation: a task the adapter watches is cancelled when the client goes away;
- an exception turned into a :class:`Failure` (HTTP status, gRPC code, message, ``Retry-After``) and
  logged by one rule: a server fault (500) with its traceback, a timeout (504) as a warning, anything
  the client or model state caused (4xx, 501, 503) as one INFO line.

An adapter is then only a codec; a new protocol adds a codec, never another copy of this.
"""
import asyncio
import itertools
import logging
import os
import time
from random import getrandbits
from typing import Any, Callable, Dict, NamedTuple, Optional

from . import metrics, tracing
from .errors import grpc_code_of, status_of
from .logging import log_info_fast, logger, trace_logger
from .triton import statistics

_perf = time.perf_counter


class Timings(dict):
    """One call's stage durations in milliseconds (``preprocess_ms``, ``predict_ms``, ``explain_ms``,
    ``postprocess_ms``: KServe's histogram keys), with the seconds its stages waited for a model thread or
    their batch (``queue_s``, inside ``predict_ms``) and the model executions it made (``executions``: a
    batch counts once, for the first of its requests)."""

    # Class-level defaults, set on the instance only when a call adds to them: making a record is then
    # just making a dict (an __init__ of Python's would cost more than the rest of it).
    queue_s = 0.0
    scheduled_s = 0.0  # seconds the call waited in its model's queue for its turn, before any stage ran
    executions = 0
    # Set by tracing on a sampled call; then the pipeline notes when it starts ("started"), the batcher the
    # batch's size ("batch_size") and a stream its responses ("chunks"), for the call's spans.
    traced = False
    started: float
    batch_size: int
    chunks: int


def _new_prefix() -> str:
    bits = f"{getrandbits(80):020x}"
    return f"{bits[:8]}-{bits[8:12]}-4{bits[12:15]}-{'89ab'[getrandbits(2)]}{bits[15:18]}-"


# Minted request ids: version-4 UUIDs whose first 18 hex digits are random per process and whose last 12
# count. Unique (ids need that, not secrecy) for less than 128 fresh random bits each (docs/performance.md).
_prefix = _new_prefix()
_serial = itertools.count(getrandbits(24))


def _after_fork() -> None:
    global _prefix
    _prefix = _new_prefix()


os.register_at_fork(after_in_child=_after_fork)


def new_request_id() -> str:
    """A request id for a call whose client sent none, in UUID form."""
    return f"{_prefix}{next(_serial) & 0xFFFFFFFFFFFF:012x}"


#: The longest ``x-request-id`` taken from a client; a longer one is replaced by a minted id.
MAX_REQUEST_ID = 256


def take_request_id(headers: Dict[str, str]) -> str:
    """The client's ``x-request-id`` in ``headers`` (lowercase names), or a new one, added to them so the
    model and a forwarded request see the same id. One longer than :data:`MAX_REQUEST_ID` characters is
    replaced by a new one (logged once, without its value): it would be echoed and logged on every line."""
    request_id = headers.get("x-request-id")
    if request_id is None:
        request_id = headers["x-request-id"] = new_request_id()
    elif len(request_id) > MAX_REQUEST_ID:
        length, request_id = len(request_id), new_request_id()
        headers["x-request-id"] = request_id
        logger.warning("an x-request-id of %d characters (more than %d) was replaced by %s", length,
                       MAX_REQUEST_ID, request_id)
    return request_id


class Failure(NamedTuple):
    """How an exception is answered: HTTP status, gRPC code name, client-facing message, Retry-After."""

    status: int
    grpc_code: str
    message: str
    retry_after: Optional[int]


def failure_of(exc: BaseException) -> Failure:
    """The answer to ``exc``, decided by its type (see errors.py)."""
    status, message = status_of(exc)
    return Failure(status, grpc_code_of(exc), message, getattr(exc, "retry_after", None))


def log_failure(where: str, failure: Failure, exc: BaseException, request_id: str) -> None:
    """Log a failed call once, by the same rule on every protocol: 500 is the server's fault (ERROR with
    the traceback), 504 a model too slow for its deadline (WARNING), others one INFO line."""
    if failure.status == 500:
        logger.error("%s failed (x-request-id %s): %s", where, request_id, exc, exc_info=exc)
    elif failure.status == 504:
        logger.warning("%s timed out (x-request-id %s): %s", where, request_id, failure.message)
    elif logger.isEnabledFor(logging.INFO):
        logger.info("%s -> %d (x-request-id %s): %s", where, failure.status, request_id, failure.message)


class Call:
    """One call from the moment it arrives until its answer is out (see the module's docstring).

    ``headers`` are the request headers as the model receives them (lowercase names); a minted
    ``x-request-id`` is added to them, so the model and a forwarded request see the same id.
    """

    __slots__ = ("protocol", "endpoint", "model_name", "headers", "request_id", "timings", "started", "gone",
                 "_label", "_label_name", "duration", "_task", "span")

    def __init__(self, protocol: str, endpoint: str, headers: Optional[Dict[str, str]] = None,
                 model_name: Optional[str] = None, label: Callable[[Optional[str]], str] = lambda name: ""):
        self.protocol, self.endpoint, self.model_name = protocol, endpoint, model_name
        self.headers = headers = {} if headers is None else headers
        self.request_id = take_request_id(headers)
        self.timings = Timings()
        self.started = _perf()
        self._label = label
        self.duration: Optional[float] = None  # seconds from arrival to answer, once the call has closed
        self.gone = False  # the client went away
        self._task: Optional[asyncio.Task] = None
        metrics.request_started(protocol)
        spans = tracing.spans  # the call's server span while tracing is on (kserve_sdk/tracing)
        self.span = None if spans is None else spans.start_call(self)

    def watch(self, task: Optional[asyncio.Task]) -> None:
        """Cancel ``task`` (the one answering this call) if the client goes away; None: stop watching."""
        self._task = task

    def client_left(self) -> None:
        """The client closed its connection: the watched task is cancelled (the model sees CancelledError)."""
        self.gone = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()

    def failed(self, exc: BaseException, where: Optional[str] = None) -> Failure:
        """How to answer ``exc``; the failure is logged here, once (``where`` names the call in the log)."""
        failure = failure_of(exc)
        log_failure(where or f"{self.protocol} {self.endpoint}", failure, exc, self.request_id)
        if self.span is not None and tracing.spans is not None:
            tracing.spans.failed(self, failure.message, exc)
        return failure

    def close(self, status: str) -> None:
        """The answer is going out with ``status`` (HTTP "200", gRPC "OK"): it is counted and its duration in
        s kept (``duration``), the first time; later calls do nothing. Adapters close a call before its last
        bytes are written, so a metrics scrape that follows an answer counts it."""
        if self.duration is not None:
            return
        self.duration = duration = _perf() - self.started
        self._label_name = label = self._label(self.model_name)  # from now on the label itself
        metrics.request_finished(label, self.protocol, self.endpoint, status, duration)
        if self.span is not None and tracing.spans is not None:
            tracing.spans.end_call(self, status)

    @property
    def model_label(self) -> str:
        """The model name as metrics and the access log name it: registered models only."""
        return self._label_name if self.duration is not None else self._label(self.model_name)


def model_call_finished(model_name: str, timings: Timings, total_ns: int, ok: bool,
                        headers: Optional[Dict[str, str]] = None, latency_line: bool = False) -> None:
    """A model call ended: Triton statistics, KServe's stage histograms and the latency line (when asked
    and the call has stage timings)."""
    if not ok:
        statistics.record_failure(model_name, total_ns, timings.executions)
        return
    statistics.record_success(model_name, timings, total_ns)
    metrics.observe_stages(model_name, timings)
    if latency_line and timings and trace_logger.isEnabledFor(logging.INFO):
        line = ((headers or {}).get("x-request-id", "N.A."), timings.get("preprocess_ms", 0.0),
                timings.get("explain_ms", 0.0), timings.get("predict_ms", 0.0), timings.get("postprocess_ms", 0.0))
        if timings.scheduled_s:  # KServe's line, with the wait in the model's queue after it
            log_info_fast(trace_logger, _LATENCY_LINE + ", queue_ms: %.3f", (*line, timings.scheduled_s * 1000))
        else:
            log_info_fast(trace_logger, _LATENCY_LINE, line)


_LATENCY_LINE = "requestId: %s, preprocess_ms: %.3f, explain_ms: %.3f, predict_ms: %.3f, postprocess_ms: %.3f"


def timings_of(call: Optional[Any]) -> Timings:
    """The call's timings record, or a fresh one for a data-plane call made without a Call (user code)."""
    return call.timings if call is not None else Timings()
