"""Adaptive batching in front of a model's ``predict``.

Concurrent v2 requests to one model wait up to ``max_latency_ms`` (or until ``max_batch_size`` rows are
queued); requests whose inputs agree in names, datatypes and every dimension but the first are merged
along the first dimension into one InferRequest, ``predict`` runs once, and its outputs are cut back
into one response per request. Requests that cannot be merged run in batches of their own; an error
fails only the requests of its batch. REST and gRPC requests share batches, since both arrive here.
"""
import asyncio
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import metrics
from .errors import InferenceError
from .lifecycle import Timings
from .protocol.infer_type import InferInput, InferOutput, InferRequest, InferResponse

Predict = Callable[[InferRequest, Dict[str, str], Timings], Awaitable[Any]]


class _Pending:
    __slots__ = ("request", "headers", "rows", "timings", "key", "future", "queued")

    def __init__(self, request: InferRequest, headers: Dict[str, str], rows: int, timings: Timings, key: Tuple):
        self.request, self.headers, self.rows, self.timings, self.key = request, headers, rows, timings, key
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.queued = time.perf_counter()


def _merge_key(request: InferRequest) -> Optional[Tuple]:
    """What must agree for two requests to share a batch; None when a request cannot be batched."""
    key = []
    for tensor in request.inputs:
        if not tensor.shape or tensor.datatype == "BYTES":
            return None
        key.append((tensor.name, tensor.datatype, tuple(tensor.shape[1:])))
    outputs = tuple(o.name for o in request.request_outputs or ())
    return tuple(key), outputs


class Batcher:
    """Collects concurrent calls to ``predict`` and runs them as batches."""

    def __init__(self, model_name: str, predict: Predict, max_batch_size: int, max_latency_ms: float):
        self.model_name = model_name
        self.predict = predict
        self.max_batch_size = max_batch_size
        self.max_latency = max_latency_ms / 1000.0
        self._queue: List[_Pending] = []
        self._rows = 0
        self._timer: Optional[asyncio.TimerHandle] = None

    async def submit(self, request: InferRequest, headers: Dict[str, str], timings: Timings) -> Any:
        """Queue ``request``; returns its own slice of the batch's result. The wait for the batch (and the
        batch's wait for a model thread) is added to the call's ``timings``; the batch's one execution is
        counted in its first request's."""
        key = _merge_key(request)
        rows = request.inputs[0].shape[0] if key is not None and request.inputs else 0
        if key is None or rows >= self.max_batch_size:
            metrics.batch_formed(self.model_name, 1)
            timings.executions += 1
            return await self.predict(request, headers, timings)
        pending = _Pending(request, headers, rows, timings, key)
        self._queue.append(pending)
        self._rows += rows
        if self._rows >= self.max_batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.max_latency, self._flush)
        return await pending.future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        queue, self._queue, self._rows = self._queue, [], 0
        groups: Dict[Tuple, List[_Pending]] = {}
        for pending in queue:
            groups.setdefault(pending.key, []).append(pending)
        for group in groups.values():
            for start in range(0, len(group), self.max_batch_size):
                asyncio.ensure_future(self._run(group[start:start + self.max_batch_size]))

    async def _run(self, batch: List[_Pending]) -> None:
        metrics.batch_formed(self.model_name, len(batch))
        batch[0].timings.executions += 1
        started, own = time.perf_counter(), Timings()  # own: the batch's wait for a model thread
        try:
            if len(batch) == 1:
                results = [await self.predict(batch[0].request, batch[0].headers, own)]
            else:
                merged = merge_requests([p.request for p in batch])
                results = split_result(await self.predict(merged, batch[0].headers, own), batch, self.model_name)
        except BaseException as e:  # the batch's error is each of its requests' error
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(e)
            return
        for pending, result in zip(batch, results, strict=True):
            if not pending.future.done():
                pending.timings.queue_s += started - pending.queued + own.queue_s
                if pending.timings.traced:  # the predict span's attribute
                    pending.timings.batch_size = len(batch)
                pending.future.set_result(result)


def merge_requests(requests: List[InferRequest]) -> InferRequest:
    """One request whose inputs are the requests' inputs stacked along the first dimension."""
    first = requests[0]
    inputs = []
    for i, tensor in enumerate(first.inputs):
        stacked = np.concatenate([r.inputs[i].as_numpy() for r in requests], axis=0)
        merged = InferInput(tensor.name, list(stacked.shape), tensor.datatype, parameters=tensor.parameters)
        merged._array = stacked
        inputs.append(merged)
    request = InferRequest(model_name=first.model_name, infer_inputs=inputs, request_id=first.id,
                           from_grpc=first.from_grpc,  # type: ignore[arg-type]  # the flag (infer_type.py)
                           parameters=first.parameters,
                           request_outputs=first.request_outputs, model_version=first.model_version)
    request._use_raw_outputs = first._use_raw_outputs
    return request


def _cut(array: np.ndarray, batch: List[_Pending], model_name: str, what: str) -> List[np.ndarray]:
    total = sum(p.rows for p in batch)
    if array.ndim == 0 or array.shape[0] != total:
        raise InferenceError(f"model '{model_name}' returned {what} with first dimension "
                             f"{array.shape[0] if array.ndim else 'none'} for a batch of {total} rows")
    bounds = np.cumsum([p.rows for p in batch])[:-1]
    return np.split(array, bounds, axis=0)


def split_result(result: Any, batch: List[_Pending], model_name: str) -> List[Any]:
    """Cut a batch's result (an InferResponse, or an array) back into one result per request."""
    if isinstance(result, InferResponse):
        per_output = [(t, _cut(t.as_numpy(), batch, model_name, f"output '{t.name}'")) for t in result.outputs]
        responses = []
        for i, pending in enumerate(batch):
            outputs = []
            for tensor, pieces in per_output:
                out = InferOutput(tensor.name, list(pieces[i].shape), tensor.datatype, parameters=tensor.parameters)
                out._array = pieces[i]
                outputs.append(out)
            responses.append(InferResponse(response_id=pending.request.id, model_name=result.model_name,
                                           infer_outputs=outputs, model_version=result.model_version,
                                           parameters=result.parameters))
        return responses
    if isinstance(result, (np.ndarray, list)):
        return _cut(np.asarray(result), batch, model_name, "an array")
    raise InferenceError(f"model '{model_name}' returned {type(result).__name__}; a batched predict must "
                         "return an InferResponse or an array")
