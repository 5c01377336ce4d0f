"""CloudEvents over HTTP for v1 ``:predict``/``:explain`` and v2 ``/infer``, as KServe 0.21 answers them.

A request is a CloudEvent when its Content-Type is ``application/cloudevents...`` (structured mode: the body
is the JSON event) or, failing that, when it has a ``ce-specversion`` header (binary mode: ``ce-*`` headers
are the attributes, the body is the data). Anything else is an ordinary request, decided by a header lookup
alone. The answer is a CloudEvent in the same mode: a new ``id`` and ``time``, ``type`` from ``CE_TYPE``
(default ``io.kserve.inference.response``), ``source`` from ``CE_SOURCE`` (default
``io.kserve.inference.<model>``), specversion 1.0. With ``CE_MERGE=true`` the request's attributes are copied
first, as KServe does, except ``id``, ``time`` (regenerated), ``datacontenttype`` (it describes the response
data now, in both modes; KServe drops it in binary mode only) and ``specversion``; ``type`` and ``source``
are always overridden.

Built on the cloudevents 2.x SDK (``cloudevents.core``): its HTTP binding maps headers and bodies, its
event classes validate; our event format leaves binary data as bytes and reads/writes JSON with orjson.
"""
import base64
import binascii
import os
from datetime import datetime
from typing import Any, Dict, Mapping, Optional, Tuple

import orjson
from cloudevents.core.bindings.common import get_event_factory_for_version
from cloudevents.core.bindings.http import HTTPMessage, from_binary, from_structured, to_binary, to_structured
from cloudevents.core.exceptions import CloudEventValidationError
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from ..errors import InvalidInput
from ..protocol.infer_type import InferResponse
from ..protocol.rest_codec import encode_infer_response, json_default

BINARY = "binary"
STRUCTURED = "structured"
STRUCTURED_JSON = "application/cloudevents+json"
JSON = "application/json"
DEFAULT_TYPE = "io.kserve.inference.response"
_REQUIRED = ("id", "source", "type", "specversion")
# Not copied from the request by CE_MERGE: regenerated, or describing the request's data only.
_NOT_MERGED = frozenset({"id", "time", "datacontenttype", "datacontentencoding", "specversion"})
_WRITE_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_UTC_Z


def _is_json_type(content_type: str) -> bool:
    return JSONFormat.JSON_CONTENT_TYPE_PATTERN.match(content_type.lower()) is not None


class _Format(JSONFormat):
    """The JSON event format, with binary-mode data kept as raw bytes and JSON read/written by orjson."""

    def read(self, event_factory, data):
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise InvalidInput(f"the structured CloudEvent is not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise InvalidInput("the structured CloudEvent must be a JSON object")
        missing = [name for name in _REQUIRED if name not in doc]
        if missing:
            raise InvalidInput(f"the structured CloudEvent lacks the required attribute(s) {', '.join(missing)}")
        payload = doc.pop("data", None)
        encoded = doc.pop("data_base64", None)
        if doc.get("datacontentencoding") == "base64" and isinstance(payload, str):  # CloudEvents 0.3
            encoded, payload = payload, None
        if payload is None and encoded is not None:
            try:
                payload = base64.b64decode(encoded, validate=True)
            except (binascii.Error, TypeError) as e:
                raise InvalidInput(f"the CloudEvent's data_base64 is not valid base64: {e}") from None
        if isinstance(doc.get("time"), str):
            doc["time"] = datetime.fromisoformat(doc["time"])
        factory = event_factory or get_event_factory_for_version(doc["specversion"])
        return factory(doc, payload)

    def read_data(self, body, datacontenttype):
        return body or None

    def write(self, event) -> bytes:
        doc = dict(event.get_attributes())
        data = event.get_data()
        if isinstance(data, (bytes, bytearray)):
            doc["data_base64"] = base64.b64encode(data).decode("ascii")
        elif data is not None:
            doc["data"] = data
        return orjson.dumps(doc, default=json_default, option=_WRITE_OPTIONS)

    def write_data(self, data, datacontenttype) -> bytes:
        if isinstance(data, (bytes, bytearray)):
            return bytes(data)
        if isinstance(data, str):
            return data.encode("utf-8")
        return orjson.dumps(data, default=json_default, option=_WRITE_OPTIONS)


_FORMAT = _Format()


def decode_cloudevent(body: bytes, headers: Mapping[str, str]) -> Optional[Tuple[Any, Dict[str, Any], str]]:
    """``(data, attributes, mode)`` when the request is a CloudEvent, None when it is an ordinary request.

    ``headers`` is looked up case-insensitively (Tornado's HTTPHeaders, or a dict with lowercase names).
    ``data`` is the parsed JSON when the event's datacontenttype is JSON (or absent and the data parses as
    JSON), bytes otherwise. A malformed event is the client's error (InvalidInput, 400).
    """
    content_type = headers.get("content-type") or ""
    if content_type[:23].lower() == "application/cloudevents":
        if content_type.split(";", 1)[0].strip().lower() != STRUCTURED_JSON:
            raise InvalidInput(f"unsupported CloudEvents format '{content_type}': only {STRUCTURED_JSON} is supported")
        mode = STRUCTURED
    elif "ce-specversion" in headers:
        missing = [f"ce-{name}" for name in _REQUIRED if f"ce-{name}" not in headers]
        if missing:
            raise InvalidInput(f"the binary-mode CloudEvent lacks the required header(s) {', '.join(missing)}")
        mode = BINARY
    else:
        return None
    message = HTTPMessage(headers=dict(headers.items()), body=body)
    try:
        event = (from_binary if mode == BINARY else from_structured)(message, _FORMAT)
    except InvalidInput:
        raise
    except CloudEventValidationError as e:
        problems = "; ".join(str(errors[0]) for errors in e.errors.values())
        raise InvalidInput(f"invalid CloudEvent: {problems}") from None
    except (ValueError, TypeError, OverflowError) as e:  # e.g. a time that is not RFC 3339
        raise InvalidInput(f"invalid CloudEvent attribute: {e}") from None
    return _decode_data(event.get_data(), event.get_datacontenttype()), event.get_attributes(), mode


def _decode_data(data: Any, content_type: Optional[str]) -> Any:
    if data is None:
        raise InvalidInput("the CloudEvent has no data")
    json_type = content_type is None or _is_json_type(content_type)
    if isinstance(data, (bytes, bytearray)):  # the binary-mode body, or a structured event's data_base64
        if json_type:
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError as e:
                if content_type is not None:
                    raise InvalidInput(f"the CloudEvent data is not valid JSON ({content_type}): {e}") from None
        return bytes(data)
    if isinstance(data, str) and not json_type:  # a structured event's textual data, e.g. text/csv
        return data.encode("utf-8")
    return data


def encode_cloudevent(response: Any, attributes: Dict[str, Any], mode: str,
                      model_name: str) -> Tuple[bytes, Dict[str, str]]:
    """The response CloudEvent, in ``mode``, for what the model returned: ``(body, headers)``.

    ``headers`` holds ``content-type`` and, in binary mode, the ``ce-*`` attributes.
    """
    out: Dict[str, Any] = {}
    if os.environ.get("CE_MERGE", "false").lower() == "true":
        out = {name: value for name, value in attributes.items() if name not in _NOT_MERGED}
    out["specversion"] = "1.0"
    out["type"] = os.environ.get("CE_TYPE", DEFAULT_TYPE)
    out["source"] = os.environ.get("CE_SOURCE", f"io.kserve.inference.{model_name}")
    data, out["datacontenttype"] = _response_data(response)
    event = CloudEvent(out, data)  # a fresh uuid4 id and the current time
    message = (to_binary if mode == BINARY else to_structured)(event, _FORMAT)
    return message.body, message.headers


def _response_data(response: Any) -> Tuple[Any, str]:
    """The event data and its datacontenttype: JSON unless the model returned bytes or text."""
    if isinstance(response, (bytes, bytearray, memoryview)):
        return bytes(response), "application/octet-stream"
    if isinstance(response, str):
        return response, "text/plain; charset=utf-8"
    if isinstance(response, InferResponse):  # v2: honours requested outputs, as the plain response does
        payload, json_length = encode_infer_response(response)
        if json_length is not None:  # binary outputs were asked for: the v2 binary body, as bytes
            return payload, "application/octet-stream"
        return orjson.Fragment(payload), JSON
    return response, JSON
