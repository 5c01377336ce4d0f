"""The spans of a call: its server span, its stages' spans, and the span of forwarding it to a predictor.

Imported only while tracing is on. The server span starts when the call opens (its parent is the
client's ``traceparent`` / ``tracestate``, from HTTP headers or gRPC metadata) and ends when the call
closes. The stage spans (preprocess, predict or explain, postprocess), and the ``queue`` span of a call that
waited for its turn in its model's queue (docs/scheduling.md), are made at the close from the call's timings
record, so the stages and the scheduler pay nothing for them; the model and a forwarded request see the
server span as their parent through the ``traceparent`` put into the call's headers.

A step of a ``@kserve_sdk.batch`` method serves many calls at once: its span (``batch <method>``) starts a
trace of its own, linked to the server span of each sampled call it computed a row for. A caller's span is
found through :data:`_call_span`, a context variable the call's start sets (tracing on only) and which the
model's code, run in the same task or in tasks it starts, sees.
"""
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Dict, Iterator, Optional, Sequence

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, StatusCode, set_span_in_context

from . import untraced as _untraced  # the endpoints the APIs declare never traced (one set, filled in place)
from .provider import MODEL_ATTRIBUTE

_STAGES = (("preprocess_ms", "preprocess"), ("predict_ms", "predict"), ("explain_ms", "explain"),
           ("postprocess_ms", "postprocess"))

#: gRPC codes that are the server's fault (OpenTelemetry's conventions; on HTTP: 5xx).
_GRPC_SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
                                 "DATA_LOSS"})

_tracer = trace.get_tracer("kserve_sdk")
# perf_counter readings (what the lifecycle and the stages take) to the epoch nanoseconds of spans
_perf_to_epoch_ns = time.time_ns() - time.perf_counter_ns()


#: The server span of the call whose model code runs in this context, while it is sampled.
_call_span: ContextVar[Optional[Any]] = ContextVar("kserve_sdk_call_span", default=None)


def _epoch_ns(perf_seconds: float) -> int:
    return _perf_to_epoch_ns + int(perf_seconds * 1e9)


def start_call(call: Any) -> Optional[Any]:
    """The server span of ``call`` (a lifecycle Call), or None for a call that is never traced."""
    if call.endpoint in _untraced:
        return None
    headers = call.headers
    attributes = {"kserve.protocol": call.protocol, "kserve.endpoint": call.endpoint,
                  "kserve.request_id": call.request_id}
    if call.model_name:
        attributes[MODEL_ATTRIBUTE] = call.model_name
    span = _tracer.start_span(f"{call.protocol} {call.endpoint}", propagate.extract(headers), SpanKind.SERVER,
                              attributes, start_time=_epoch_ns(call.started))
    propagate.inject(headers, set_span_in_context(span))  # the model and its predictor see this span as parent
    if span.is_recording():
        call.timings.traced = True  # the stages note when they start (see end_call)
        _call_span.set(span)
    else:  # a call not sampled: a batch step it joins links to no earlier call of the same task
        _call_span.set(None)
    return span


def failed(call: Any, message: str, exc: BaseException) -> None:
    """The call failed with ``exc``, answered with ``message``: an exception event on its span."""
    span = call.span
    if span.is_recording():
        span.set_attribute("kserve.error", message)
        span.record_exception(exc)


def end_call(call: Any, status: str) -> None:
    """The call's answer went out with ``status``: its stage spans are made and its server span ends."""
    span = call.span
    if not span.is_recording():
        return
    span.set_attribute("kserve.status", status)
    if call.model_name:
        span.set_attribute(MODEL_ATTRIBUTE, call.model_name)
    timings = call.timings
    chunks = timings.__dict__.get("chunks")
    if chunks is not None:
        span.set_attribute("kserve.stream.chunks", chunks)
    if status[:1] == "5" or status in _GRPC_SERVER_ERRORS:
        span.set_status(StatusCode.ERROR, f"answered {status}")
    if timings.scheduled_s:
        _queue_span(span, call.started, timings)
    _stage_spans(span, timings)
    span.end()


def _queue_span(parent: Any, call_started: float, timings: Any) -> None:
    """The call's wait in its model's queue (``kserve.scheduler.wait_ms``, on the call's span too): it ended
    as the pipeline began; a call run outside the pipeline, which notes no start, has it placed from the
    call's own start."""
    wait_s = timings.scheduled_s
    attributes = {"kserve.scheduler.wait_ms": wait_s * 1000}
    parent.set_attribute("kserve.scheduler.wait_ms", wait_s * 1000)
    began = timings.__dict__.get("started")
    start = call_started if began is None else max(began - wait_s, call_started)
    queue = _tracer.start_span("queue", set_span_in_context(parent), SpanKind.INTERNAL, attributes,
                               start_time=_epoch_ns(start))
    queue.end(end_time=_epoch_ns(start + wait_s))


def _stage_spans(parent: Any, timings: Dict[str, float]) -> None:
    """preprocess, predict (or explain) and postprocess, one after the other from when the pipeline began."""
    started = timings.__dict__.get("started")
    if started is None:
        return
    context, at = set_span_in_context(parent), _epoch_ns(started)
    for key, name in _STAGES:
        ms = timings.get(key)
        if ms is None:
            continue
        attributes = {}
        if name in ("predict", "explain"):
            if timings.queue_s:
                attributes["kserve.queue_ms"] = timings.queue_s * 1000
            batch_size = timings.__dict__.get("batch_size")
            if batch_size is not None:
                attributes["kserve.batch_size"] = batch_size
        stage = _tracer.start_span(name, context, SpanKind.INTERNAL, attributes, start_time=at)
        at += int(ms * 1e6)
        stage.end(end_time=at)


@contextmanager
def forwarding(headers: Dict[str, str], model_name: str, target: str, protocol: str) -> Iterator[None]:
    """A client span around forwarding to ``target`` (the predictor), child of the call's span found in
    ``headers`` (what is sent on), whose ``traceparent`` then names the client span."""
    attributes = {MODEL_ATTRIBUTE: model_name, "server.address": target, "kserve.predictor_protocol": protocol}
    span = _tracer.start_span(f"forward {protocol}", propagate.extract(headers), SpanKind.CLIENT, attributes)
    propagate.inject(headers, set_span_in_context(span))
    try:
        yield
    except BaseException as e:
        span.set_status(StatusCode.ERROR, str(e))
        span.record_exception(e)
        raise
    finally:
        span.end()


def current_call_span() -> Optional[Any]:
    """The server span of the sampled call this code runs for (what a batched method's caller links from)."""
    return _call_span.get()


def batch_step(model_name: str, method: str, started: float, rows: Sequence[Any]) -> None:
    """A step of ``@kserve_sdk.batch`` method ``method`` that began at ``started`` (perf_counter) and has just
    ended, for ``rows`` (``(item, future, task, call span)``): its span, linked to the calls' spans. No span
    when none of its callers is sampled, so Triton's trace settings and the sampler rule steps as they rule
    calls."""
    callers = {id(row[3]): row[3] for row in rows if row[3] is not None}
    if not callers:
        return
    attributes = {MODEL_ATTRIBUTE: model_name, "kserve.batch.method": method, "kserve.batch_size": len(rows)}
    links = [Link(span.get_span_context()) for span in callers.values()]
    span = _tracer.start_span(f"batch {method}", Context(), SpanKind.INTERNAL, attributes, links,  # a root
                              start_time=_epoch_ns(started))
    span.end()
