"""Streaming REST: ``infer_stream`` and ``generate_stream`` as Server-Sent Events, ``generate``, and v1
``:predict`` of a model whose predict yields (a chunked body, one JSON line per response).

An error before the first response is an ordinary HTTP error; after it, a final event
``data: {"error": "..."}`` ends the stream cleanly. A client that goes away cancels the model's generator,
and so does one that stops reading for ``--send_timeout_seconds``; the call is counted 499.
"""
import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Optional, Tuple

from orjson import loads as orjson_loads
from tornado.iostream import StreamClosedError

from ..errors import InvalidInput
from ..protocol.generate import is_tensor_request, merge_generate, to_generate_json
from ..protocol.infer_type import InferRequest, InferResponse
from ..protocol.rest.json_body import json_object
from ..protocol.rest_codec import dumps, encode_infer_response
from .api import MODEL, VERSION, RestAPI
from .base import BaseHandler, cancel_on_disconnect
from .cloudevents import decode_cloudevent, encode_cloudevent
from .inference import cloudevent_reply


def sse_event(payload: bytes) -> bytes:
    """One Server-Sent Event carrying a JSON document."""
    return b"data: " + payload + b"\n\n"


#: Responses that come within this many seconds of the last flush go out together in the next one, this
#: long after it (one socket write instead of one per response, for models that yield faster than that); a
#: response that comes later, as every token of a real LLM does, goes out at once.
COALESCE_SECONDS = 0.001
#: The same while other streams are being sent too: then the socket writes, not the model, are most of the
#: CPU a fast stream costs, and sharing them over a longer window lets the process send more events in all.
CROWDED_COALESCE_SECONDS = 0.005
#: How many streams this process is sending now.
_sending = 0
#: Buffered bytes that are flushed at once, whatever the time.
COALESCE_BYTES = 64 * 1024


class StreamingHandler(BaseHandler):
    """Writes an async iterator of responses as they come: each at once, unless the last flush was within
    ``COALESCE_SECONDS`` (``CROWDED_COALESCE_SECONDS`` while other streams are sent too); then with the
    others of that window, so a model that yields faster shares socket writes."""

    _unsent: Optional[list] = None  # encoded responses not yet handed to Tornado; None until the first
    _unsent_bytes = 0
    _sent = 0
    _flushed_at = 0.0  # the loop's time of the last flush
    _flush_timer: Optional[asyncio.TimerHandle] = None
    _behind: Optional[Awaitable[Any]] = None  # a flush the socket did not take at once: the client is behind

    async def send_stream(self, items: AsyncIterator[Any], encode: Callable[[Any], bytes], frame: Callable,
                          content_type: str, response_headers: Dict[str, str], trailer: bytes = b"") -> None:
        """Send ``items`` (an async iterator, or a :class:`~kserve_sdk.model_call.CountedStream`, which
        is pumped), each as ``encode(item)`` (framed: the bytes that go out). Errors before the first
        become HTTP errors, a later one the final frame ``frame(error document)``; ``trailer`` (e.g. an SSE
        ``[DONE]`` event) goes last."""
        global _sending
        call = self.open_call()
        call.watch(asyncio.current_task())
        _sending += 1
        # the headers go with the first response: a model may set response_headers until it yields it
        self._encode, self._stream_headers = encode, (content_type, response_headers)
        self._loop = asyncio.get_running_loop()
        try:
            try:
                if hasattr(items, "pump"):
                    await items.pump(self._send_item)
                else:
                    async for item in items:
                        waiting = self._send_item(item)
                        if waiting is not None:
                            await waiting
            except (asyncio.CancelledError, StreamClosedError):
                raise
            except Exception as e:
                if self._unsent is None:  # nothing sent yet: an ordinary HTTP error
                    raise
                # mid-stream: the client has a 200 already, so the error is an event
                failure = call.failed(e, f"{self.request.method} {self.request.path} (mid-stream)")
                waiting = self._queue(frame(self.error_event(failure)))
                if waiting is not None:
                    await waiting
            if self._unsent is None:  # no responses: the headers and the trailer only
                self._set_stream_headers()
            self._write_unsent()
            self.finish(trailer)  # sends what is buffered; the finally below drops the timer
        except (asyncio.CancelledError, StreamClosedError):
            # The client went away, or stopped reading until --send_timeout_seconds closed its connection:
            # nothing more to send, and the call is counted and logged 499, as a unary call whose client left.
            self.set_status(499, "Client Closed Request")
        finally:
            _sending -= 1
            call.watch(None)
            self._cancel_flush_timer()
            await items.aclose()

    def error_event(self, failure: Any) -> bytes:
        """The document of the event that ends a stream which failed midway (``failure``: lifecycle's)."""
        return self.error_document(failure.status, failure.message)

    def _send_item(self, item: Any) -> Optional[Awaitable[Any]]:
        """Send one response: the first at once, with the headers; what to await before the next, if any."""
        chunk = self._encode(item)
        if self._unsent is None:
            self._set_stream_headers()
            # Tornado leaves Nagle's algorithm on until the response ends: a stream's events go out
            # when written, not when the peer's acknowledgement of the last one comes back.
            self.request.connection.stream.set_nodelay(True)
            self._unsent, self._sent = [chunk], 1
            # Not awaited: the model goes on at once (a batched model's next step waits for every stream
            # it serves to ask again), unless the socket did not take it all.
            self._flush_unsent()
            return self._behind
        waiting = self._queue(chunk)
        self._sent += 1
        if waiting is None and self._behind is not None:
            return self._behind  # the client reads slower than the model yields: the model waits for it
        if waiting is None and self._sent % 32 == 0:
            # A write to a ready socket completes without yielding: give other requests a turn, or a
            # model that yields without awaiting keeps the loop to itself.
            if _sending == 1:  # alone, what is queued goes out first: the client reads it meanwhile
                self._flush_unsent()
            return self._behind or asyncio.sleep(0)
        return waiting

    def _set_stream_headers(self) -> None:
        content_type, response_headers = self._stream_headers
        self.set_header("Content-Type", content_type)
        self.set_header("Cache-Control", "no-cache")
        for name, value in response_headers.items():
            self.set_header(name, value)

    def _queue(self, chunk: bytes) -> Optional[Awaitable[Any]]:
        self._unsent.append(chunk)
        self._unsent_bytes += len(chunk)
        if self._unsent_bytes >= COALESCE_BYTES:
            self._cancel_flush_timer()
            self._write_unsent()
            return self.flush()  # awaited: a slow client slows the stream, not our memory
        if self._flush_timer is None:
            loop = self._loop
            due = self._flushed_at + (COALESCE_SECONDS if _sending == 1 else CROWDED_COALESCE_SECONDS)
            if loop.time() < due or self._behind is not None:
                self._flush_timer = loop.call_at(due, self._timed_flush)
            else:  # nothing went out for a window: no reason to hold this one back
                self._flush_unsent()
        return None

    def _write_unsent(self) -> None:
        """Hand the responses sent since the last flush to Tornado, as one write (a flush follows)."""
        if self._unsent:
            self.write(b"".join(self._unsent))
            self._unsent.clear()
        self._unsent_bytes = 0
        self._flushed_at = self._loop.time()

    def _timed_flush(self) -> None:
        self._flush_timer = None
        if not self._finished:
            self._flush_unsent()

    def _flush_unsent(self) -> None:
        """Send what is queued without waiting for it. When the socket does not take it all at once, the
        flush is kept in ``_behind`` until it completes, and the stream waits for it before going on: a
        slow client slows the stream rather than growing Tornado's write buffer."""
        self._cancel_flush_timer()
        self._write_unsent()
        flushed = self.flush()
        if self._behind is None and self.request.connection.stream.writing():
            self._behind = flushed
            flushed.add_done_callback(self._caught_up)
        else:
            flushed.add_done_callback(_ignore_closed)

    def _caught_up(self, flushed: "asyncio.Future") -> None:
        self._behind = None
        _ignore_closed(flushed)

    def _cancel_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None


def _ignore_closed(future: "asyncio.Future") -> None:
    """A timed flush to a client that has gone: the stream's own task sees the close and stops."""
    if not future.cancelled():
        future.exception()


class _GenerateBody:
    """What generate / stream handlers share: reading the request, from plain JSON or a CloudEvent."""

    async def read_request(self: BaseHandler, name: str, version: Optional[str],
                           tensors_only: bool = False) -> Tuple[Any, bool, Optional[tuple]]:
        """``(request, tensor_form, event)``: an InferRequest for a tensor body, else the generate-form dict."""
        await self.dataplane.ready_model(name, version)
        event = decode_cloudevent(self.request.body, self.request.headers)
        if event is None:
            doc = json_object(self.request.body)
        elif isinstance(event[0], dict):
            doc = event[0]
        else:
            raise InvalidInput("the CloudEvent's data must be a JSON object for this endpoint")
        tensor_form = is_tensor_request(doc)
        if not (tensor_form or tensors_only):
            return doc, False, event
        request = InferRequest.from_dict(doc, name)  # a generate-form body raises here
        request.model_version = version
        return request, True, event


class InferStreamHandler(StreamingHandler, _GenerateBody):
    """``POST /v2/models/<m>[/versions/<v>]/infer_stream`` and ``/generate_stream``: one event per response."""

    endpoint = "infer_stream"

    async def post(self, name: str, version: Optional[str] = None) -> None:
        request, tensor_form, event = await self.read_request(name, version, self.endpoint == "infer_stream")
        response_headers: Dict[str, str] = {}
        items = self.dataplane.stream(name, request, self.request_headers(), response_headers, call=self.call)

        def encode(item: Any) -> bytes:
            if tensor_form and isinstance(item, InferResponse):
                return sse_event(encode_infer_response(item, json_only=True)[0])
            return sse_event(dumps(item if tensor_form else to_generate_json(item, name, version)))

        if event is not None:  # the stream's attributes as a binary-mode CloudEvent; each event stays JSON
            ce_headers = encode_cloudevent({}, event[1], "binary", name)[1]
            response_headers.update({k: v for k, v in ce_headers.items() if k.lower().startswith("ce-")})
        await self.send_stream(items, encode, sse_event, "text/event-stream", response_headers)


class GenerateStreamHandler(InferStreamHandler):
    """``POST /v2/models/<m>[/versions/<v>]/generate_stream``: tensor or generate-form requests."""

    endpoint = "generate_stream"


class GenerateHandler(BaseHandler, _GenerateBody):
    """``POST /v2/models/<m>[/versions/<v>]/generate``: one response; a streaming model's responses merged."""

    endpoint = "generate"

    @cancel_on_disconnect
    async def post(self, name: str, version: Optional[str] = None) -> None:
        request, tensor_form, event = await self.read_request(name, version)
        response_headers: Dict[str, str] = {}
        items = [item async for item in self.dataplane.stream(name, request, self.request_headers(),
                                                              response_headers, call=self.call)]
        if tensor_form and len(items) == 1 and isinstance(items[0], InferResponse):
            body = encode_infer_response(items[0], json_only=True)[0]
        else:
            body = dumps(merge_generate([to_generate_json(item, name, version) for item in items]))
        if event is not None:
            return self.send_reply(cloudevent_reply(orjson_loads(body), event, name, response_headers))
        self.send_body(body, headers=response_headers)


class V1StreamingPredict(StreamingHandler):
    """v1 ``:predict`` on a model whose predict yields: a chunked body, one JSON line (or raw chunk) each."""

    protocol, endpoint = "rest_v1", "predict"

    async def stream_v1(self, name: str, request: Any) -> None:
        response_headers: Dict[str, str] = {}
        items = self.dataplane.stream(name, request, self.request_headers(), response_headers, call=self.call)

        def encode(item: Any) -> bytes:
            if isinstance(item, (bytes, bytearray)):
                return bytes(item)
            return item.encode("utf-8") if isinstance(item, str) else dumps(item) + b"\n"

        await self.send_stream(items, encode, lambda chunk: chunk, "application/x-ndjson", response_headers)


#: The v2 streams and ``generate`` (v1's streamed ``:predict`` is v1's route, answered by V1StreamingPredict).
API = RestAPI("v2_streams", [
    (rf"/v2/models/{MODEL}{VERSION}/infer_stream", InferStreamHandler),
    (rf"/v2/models/{MODEL}{VERSION}/generate", GenerateHandler),
    (rf"/v2/models/{MODEL}{VERSION}/generate_stream", GenerateStreamHandler),
])
