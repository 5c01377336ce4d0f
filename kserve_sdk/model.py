"""The class a data scientist subclasses: load -> preprocess -> predict -> postprocess (+ explain).

Every stage may be written as a plain ``def`` or as ``async def``. Plain ones run in the server's
thread pool (``--max_asyncio_workers`` threads), so a slow synchronous model never blocks the event
loop, health probes or other requests; async ones run on the loop.
"""
import asyncio
import functools
import inspect
import time
from abc import ABC, abstractmethod
from contextlib import aclosing
from enum import Enum
from types import FunctionType, GeneratorType
from typing import Any, AsyncIterator, Awaitable, Dict, List, Optional, Tuple, Union

from . import context
from .constants.constants import PredictorProtocol
from .errors import InvalidInput
from .executor import run_stage
from .lifecycle import Timings
from .predictor_config import PredictorConfig
from .protocol.infer_type import InferRequest, InferResponse

_FORWARDED_HEADERS = ("x-request-id", "x-b3-traceid", "authorization", "traceparent", "tracestate")

#: What a model's call may return (KServe's type names): a v1 dict, an InferResponse, a list of text, or
#: an awaitable of one.
InferReturnValueTypes = Union[Dict, InferResponse, List[str]]
InferReturnType = Union[InferReturnValueTypes, Awaitable[InferReturnValueTypes]]


def check_lists(payload: Any) -> Any:
    """``payload`` itself, unless it is a dict whose ``instances`` (v1) or ``inputs`` (v2) is not a list:
    InvalidInput naming the field."""
    if isinstance(payload, dict):
        for key in ("instances", "inputs"):
            if key in payload and not isinstance(payload[key], list):
                raise InvalidInput(f'Expected "{key}" to be a list')
    return payload


def append_forwardable_headers(headers: Optional[Dict[str, str]],
                               base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` (a copy) plus the request headers a transformer passes on to its predictor or explainer:
    ``x-request-id``, ``x-b3-traceid``, ``authorization`` (KServe's), and the W3C trace context
    (``traceparent``, ``tracestate``). ``headers`` are the incoming request's, with lower-case names."""
    out = dict(base) if base else {}
    if headers:
        for key in _FORWARDED_HEADERS:
            if key in headers:
                out[key] = headers[key]
    return out


def is_v2(protocol: Union[str, PredictorProtocol]) -> bool:
    """Whether a transformer reaching its predictor over ``protocol`` speaks the v2 protocol: True for "v2"
    and "grpc-v2" (REST or gRPC), False for "v1" (as a string or a PredictorProtocol)."""
    return _spelled(protocol) != PredictorProtocol.REST_V1.value


def get_latency_ms(start: float, end: float) -> float:
    """Milliseconds from ``start`` to ``end`` (both in seconds, e.g. ``time.time()``), rounded to 9 decimals."""
    return round((end - start) * 1000, 9)


_PROTOCOL_NAMES = {p.value for p in PredictorProtocol}


def _spelled(protocol: Union[str, PredictorProtocol]) -> str:
    """A protocol given as a PredictorProtocol or a string in any case, as the lower-case string."""
    return protocol.value if isinstance(protocol, PredictorProtocol) else str(protocol).lower()


def _protocol_name(protocol: Union[str, PredictorProtocol]) -> str:
    """"v1", "v2" or "grpc-v2" for a protocol given as a PredictorProtocol or a string in any case; ValueError
    naming the choices for anything else."""
    name = _spelled(protocol)
    if name not in _PROTOCOL_NAMES:
        raise ValueError(f"protocol must be one of v1, v2, grpc-v2 (or a PredictorProtocol); got {protocol!r}")
    return name


class BaseKServeModel(ABC):
    """What the model repository and the server need of any model: a name and readiness."""

    @abstractmethod
    def __init__(self, name: str):
        self.name = name
        self.ready = False
        self.engine = False

    async def healthy(self) -> bool:
        """Whether the model can serve; by default its ``ready`` flag."""
        return self.ready

    def load(self) -> bool:
        """Load the model (override this); set ``self.ready = True`` when it can serve."""
        self.ready = True
        return self.ready

    def start(self) -> None:
        """Called once when the server starts serving this model."""

    async def start_engine(self) -> None:
        """Start a long-running engine the model needs (only when ``self.engine`` is True)."""

    def stop(self) -> None:
        """Called when the server stops or the model is unloaded; the model stops serving."""
        self.ready = False

    def stop_engine(self) -> None:
        """Stop the engine started by ``start_engine``."""


class InferenceVerb(Enum):
    """What a call asks of the model."""

    EXPLAIN = 1
    PREDICT = 2


class InferenceModel(BaseKServeModel):
    """A model that answers inference calls and describes its tensors."""

    @abstractmethod
    def __call__(self, body: Any, headers: Optional[Dict[str, str]] = None,
                 verb: InferenceVerb = InferenceVerb.PREDICT) -> Awaitable:
        """Run one inference call."""

    def get_input_types(self) -> List[Dict]:
        """Input tensor descriptions for v2 model metadata: ``[{"name", "datatype", "shape"}]``."""
        return []

    def get_output_types(self) -> List[Dict]:
        """Output tensor descriptions for v2 model metadata: ``[{"name", "datatype", "shape"}]``."""
        return []


_stage_kinds: Dict[Any, str] = {}


def stage_kind(fn: Any) -> str:
    """"asyncgen", "async" or "sync": how a stage function runs. Remembered per function, because a
    bound method is a new object on every access and inspect's checks cost more than the lookup."""
    key = getattr(fn, "__func__", fn)
    kind = _stage_kinds.get(key)
    if kind is None:
        kind = "asyncgen" if inspect.isasyncgenfunction(fn) else "async" if inspect.iscoroutinefunction(fn) \
            else "sync"
        if isinstance(key, FunctionType):  # other callables (partials, objects) may be made per call
            _stage_kinds[key] = kind
    return kind


# Remembered per class: hasattr() on a class without the attribute builds an AttributeError (message
# included) before it answers False, which is most of the cost of asking per call.
@functools.lru_cache(maxsize=1024)
def _awaitable_class(cls: type) -> bool:
    return hasattr(cls, "__await__")


def _is_awaitable(value: Any) -> bool:
    cls = type(value)
    return _awaitable_class(cls) or (cls is GeneratorType and inspect.isawaitable(value))


async def call_stage(fn, *args, timings: Optional[Timings] = None) -> Any:
    """Run a user stage: ``async def`` on the loop, plain ``def`` on a model thread (or on the loop once
    it has proved quick: see ``executor.run_stage``). Its wait for a thread is added to ``timings``."""
    if stage_kind(fn) == "async":
        return await fn(*args)
    result = run_stage(fn, *args)
    if isinstance(result, asyncio.Future):  # it went to the pool (asyncio.isfuture would build an error)
        result, waited = await result
        if timings is not None:
            timings.queue_s += waited
    if _is_awaitable(result):
        result = await result
    return result


class Model(InferenceModel):
    """A model served by ``ModelServer``. Subclass it and override ``load`` and ``predict``.

    Args:
        name: the name clients use in URLs (``/v1/models/<name>:predict``).
        return_response_headers: pass a ``response_headers`` dict to ``predict`` and ``postprocess``;
            what they put in it is sent back as HTTP response headers (gRPC: metadata).
        predictor_config: where the default ``predict`` forwards to; by default the server's
            ``--predictor_host`` settings.
        max_batch_size: with a value above 1, concurrent v2 requests are merged along their first
            dimension into one ``predict`` call of up to this many rows (adaptive batching).
        max_latency_ms: how long a request may wait for others to join its batch.
    """

    max_batch_size: Optional[int] = None
    max_latency_ms: float = 10.0
    #: the protocol the model's code set (``self.protocol = ...``); None: the predictor configuration's
    _protocol: Optional[str] = None
    _protocol_config: Optional[Tuple[PredictorConfig, PredictorConfig]] = None

    def __init__(self, name: str, return_response_headers: bool = False,
                 predictor_config: Optional[PredictorConfig] = None, max_batch_size: Optional[int] = None,
                 max_latency_ms: Optional[float] = None):
        super().__init__(name)
        if isinstance(return_response_headers, PredictorConfig):  # KServe <= 0.14 passed it second.
            predictor_config, return_response_headers = return_response_headers, False
        self.explainer_host: Optional[str] = None
        self.enable_latency_logging = False
        self.return_response_headers = return_response_headers
        self._predictor_config = predictor_config
        if max_batch_size is not None:
            self.max_batch_size = max_batch_size
        if max_latency_ms is not None:
            self.max_latency_ms = max_latency_ms
        self._batcher = None

    @property
    def required_response_headers(self) -> bool:
        """KServe's name for ``return_response_headers``, which setting it sets."""
        return self.return_response_headers

    @required_response_headers.setter
    def required_response_headers(self, value: bool) -> None:
        self.return_response_headers = value

    @property
    def predictor_config(self) -> Optional[PredictorConfig]:
        """Where the default ``predict`` forwards to (the server's ``--predictor_*`` flags unless set)."""
        return self._predictor_config or context.get_predictor_config()

    @property
    def protocol(self) -> str:
        """The protocol this model speaks to its predictor: "v1", "v2" or "grpc-v2". By default the predictor
        configuration's (``--predictor_protocol``); a transformer may set it (``self.protocol = "grpc-v2"``,
        or a PredictorProtocol), and the default ``predict`` then forwards over that protocol. Setting None
        goes back to the configuration's; any other value is a ValueError."""
        if self._protocol is not None:
            return self._protocol
        config = self.predictor_config
        return config.predictor_protocol if config else PredictorProtocol.REST_V1.value

    @protocol.setter
    def protocol(self, value: Union[str, PredictorProtocol, None]) -> None:
        self._protocol = None if value is None else _protocol_name(value)

    def _config_over(self, config: PredictorConfig) -> PredictorConfig:
        """``config`` speaking the protocol set on the model (made once per configuration and protocol)."""
        made, protocol = self._protocol_config, self.protocol
        if made is None or made[0] is not config or made[1].predictor_protocol != protocol:
            made = self._protocol_config = (config, PredictorConfig(
                config.predictor_host, protocol, config.predictor_use_ssl,
                config.predictor_request_timeout_seconds, config.predictor_request_retries,
                config.predictor_health_check))
        return made[1]

    async def __call__(self, body: Any, headers: Optional[Dict[str, str]] = None,
                       verb: InferenceVerb = InferenceVerb.PREDICT) -> Tuple[Any, Dict[str, str]]:
        """Run preprocess -> predict (or explain) -> postprocess; return ``(response, response_headers)``."""
        response, response_headers = await self.run_pipeline(body, headers, verb, Timings())
        return response, response_headers

    async def run_pipeline(self, body: Any, headers: Optional[Dict[str, str]], verb: InferenceVerb,
                           timings: Timings) -> Tuple[Any, Dict[str, str]]:
        """The pipeline: ``(response, response_headers)``; each stage's duration (ms), the wait for a
        model thread or a batch and the executions go into the call's ``timings``."""
        headers = {} if headers is None else headers
        response_headers: Dict[str, str] = {}
        extra = (response_headers,) if self.return_response_headers else ()

        start = time.perf_counter()
        if timings.traced:  # a sampled call's stage spans are placed from here (kserve_sdk/tracing/spans.py)
            timings.started = start
        # the stages a model does not override are skipped here, without a coroutine each
        payload = await self._preprocess(body, headers) if self._overrides("preprocess") else self.validate(body)
        mid = time.perf_counter()
        timings["preprocess_ms"] = (mid - start) * 1000
        predict = self.predict  # a new bound method on every access: taken once
        if verb is InferenceVerb.PREDICT and stage_kind(predict) == "asyncgen":  # streams_responses()
            raise InvalidInput(f"model '{self.name}' streams its responses: call /v2/models/{self.name}/infer_stream "
                               "or generate_stream (REST), or ModelStreamInfer (gRPC)")
        batched = verb is not InferenceVerb.EXPLAIN and self.batches(payload)
        scheduled_before = timings.scheduled_s  # a stage that takes its model's slot waits for it inside
        if verb is InferenceVerb.EXPLAIN:
            result = await call_stage(self.explain, payload, headers, timings=timings)
            stage = "explain_ms"
        elif batched:
            result = await self._batching().submit(payload, headers, timings)
            stage = "predict_ms"
        else:
            result = await call_stage(predict, payload, headers, *extra, timings=timings)
            stage = "predict_ms"
        if not batched:  # the batcher counts the executions it makes
            timings.executions += 1
        end = time.perf_counter()
        waited = timings.scheduled_s - scheduled_before
        if waited:  # the stage's time is the model's: its wait for the slot comes before it
            mid += waited
            if timings.traced:
                timings.started += waited
        timings[stage] = (end - mid) * 1000
        if self._overrides("postprocess"):
            result = await call_stage(self.postprocess, result, headers, *extra)
        timings["postprocess_ms"] = (time.perf_counter() - end) * 1000
        return result, response_headers

    def runs_one_thread_stage(self, verb: InferenceVerb) -> bool:
        """Whether the model's only stage of its own in a ``verb`` call is one plain ``def`` (predict or
        explain, no preprocess, postprocess, validate or batching of its own): with a scheduling policy, that
        stage waits for the model's slot with its thread job ready, and the slot passes between such calls on
        the model's thread (kserve_sdk/scheduling/queue.py)."""
        if self._overrides("preprocess") or self._overrides("postprocess") or self._overrides("validate"):
            return False
        if verb is InferenceVerb.EXPLAIN:
            return stage_kind(self.explain) == "sync"
        return verb is InferenceVerb.PREDICT and stage_kind(self.predict) == "sync" and not (
            self.max_batch_size and self.max_batch_size > 1)

    def batches(self, payload: Any) -> bool:
        """Whether this call goes through the adaptive batcher (v2 requests, batching on)."""
        return bool(self.max_batch_size and self.max_batch_size > 1 and isinstance(payload, InferRequest)
                    and not self.return_response_headers)

    def batching_changed(self) -> None:
        """Call after changing ``max_batch_size`` or ``max_latency_ms`` of a model already serving: the next
        call batches with the new values (calls already waiting in a batch finish with the old ones)."""
        self._batcher = None

    def _batching(self):
        if self._batcher is None:
            from .batching import Batcher

            self._batcher = Batcher(self.name, lambda request, headers, timings: call_stage(
                self.predict, request, headers, timings=timings), int(self.max_batch_size), float(self.max_latency_ms))
        return self._batcher

    def _overrides(self, stage: str) -> bool:
        """Whether this model's class overrides Model's ``stage`` ("preprocess", "postprocess", "validate"). Model's
        own pass their input through, so callers skip them, and the coroutine each would cost."""
        return getattr(type(self), stage) is not getattr(Model, stage)

    async def _preprocess(self, body: Any, headers: Dict[str, str]) -> Any:
        if self._overrides("preprocess"):
            # the body as it came is checked too: a preprocess may turn {"instances": 5} into valid input
            body = await call_stage(self.preprocess, check_lists(body), headers)
        return self.validate(body)

    # --- streaming ----------------------------------------------------------------------------------
    def streams_responses(self) -> bool:
        """Whether ``predict`` is an async generator (one request in, many responses out)."""
        return stage_kind(self.predict) == "asyncgen"

    def streams_requests(self) -> bool:
        """Whether the model overrides ``predict_stream`` (it consumes a stream of requests)."""
        return type(self).predict_stream is not Model.predict_stream

    async def predict_stream(self, payloads: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Answer a stream of (preprocessed) requests with a stream of responses.

        Override it to consume the whole stream (MLServer's signature). By default every request is
        answered in order by ``predict``: once, or once per item when ``predict`` is an async generator.
        """
        async for payload in payloads:
            async for item in self._predict_items(payload, {}, ()):
                yield item

    async def _predict_items(self, payload: Any, headers: Dict[str, str], extra: tuple) -> AsyncIterator[Any]:
        if self.streams_responses():
            async with aclosing(self.predict(payload, headers, *extra)) as items:
                async for item in items:
                    yield item
        else:
            yield await call_stage(self.predict, payload, headers, *extra)

    async def stream(self, body: Any, headers: Dict[str, str], response_headers: Dict[str, str],
                     timings: Dict[str, float]) -> AsyncIterator[Any]:
        """One request in, postprocessed responses out; stage durations are added to ``timings``."""
        extra = (response_headers,) if self.return_response_headers else ()
        start = time.perf_counter()
        if getattr(timings, "traced", False):
            timings.started = start
        payload = await self._preprocess(body, headers)
        timings["preprocess_ms"] = (time.perf_counter() - start) * 1000
        postprocessed = self._overrides("postprocess")
        async with aclosing(self._predict_items(payload, headers, extra)) as items:
            async for item in items:
                yield await call_stage(self.postprocess, item, headers, *extra) if postprocessed else item
        timings["predict_ms"] = (time.perf_counter() - start) * 1000 - timings["preprocess_ms"]

    async def stream_in(self, bodies: AsyncIterator[Any], headers: Dict[str, str]) -> AsyncIterator[Any]:
        """A stream of requests in, through ``predict_stream``; each is preprocessed, each answer postprocessed."""
        async def preprocessed():
            async for body in bodies:
                yield await self._preprocess(body, headers)

        postprocessed = self._overrides("postprocess")
        async with aclosing(self.predict_stream(preprocessed())) as items:
            async for item in items:
                yield await call_stage(self.postprocess, item, headers) if postprocessed else item

    def validate(self, payload: Any) -> Any:
        """Reject payloads whose ``instances`` (v1) or ``inputs`` (v2) is not a list."""
        return check_lists(payload)

    async def preprocess(self, payload: Union[Dict, InferRequest],
                         headers: Optional[Dict[str, str]] = None) -> Any:
        """Turn the request into model input. Receives a dict (v1) or an InferRequest (v2)."""
        return payload

    async def postprocess(self, result: Any, headers: Optional[Dict[str, str]] = None,
                          response_headers: Optional[Dict[str, str]] = None) -> Any:
        """Turn the prediction into the response: a dict (v1), an InferResponse (v2), arrays or bytes."""
        return result

    async def predict(self, payload: Any, headers: Optional[Dict[str, str]] = None,
                      response_headers: Optional[Dict[str, str]] = None) -> Any:
        """Run inference. By default forwards to ``--predictor_host`` (a transformer); override it otherwise."""
        config = self.predictor_config
        if config is None or not config.predictor_host:
            raise NotImplementedError("Could not find predictor_host.")
        from .clients.forward import forward_predict

        if self._protocol is not None and self._protocol != config.predictor_protocol:
            config = self._config_over(config)
        return await forward_predict(self, config, payload, append_forwardable_headers(headers), response_headers)

    async def explain(self, payload: Any, headers: Optional[Dict[str, str]] = None) -> Any:
        """Explain a prediction. By default forwards to ``explainer_host``; 501 when there is none."""
        if not self.explainer_host:
            raise NotImplementedError("Could not find explainer_host.")
        from .clients.forward import forward_explain

        return await forward_explain(self, payload, append_forwardable_headers(headers))
