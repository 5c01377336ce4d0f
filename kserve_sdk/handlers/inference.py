"""The inference routes' work apart from how HTTP carries it: a body and its headers in, a Reply out.

``POST /v2/models/<m>[/versions/<v>]/infer`` and ``POST /v1/models/<m>:predict`` / ``:explain`` are served
by fast_path.py in the common case and by the RequestHandlers of v1.py and v2.py otherwise; both call these
functions, so a client gets the same answer whichever served it.
"""
from typing import Any, Dict, Optional, Tuple

from tornado.httputil import HTTPHeaders

from ..dataplane import DataPlane, encode_model_answer, not_a_v2_response
from ..errors import InvalidInput
from ..lifecycle import Call
from ..protocol.classification import check_class_counts, classify_requested
from ..protocol.infer_type import InferRequest, InferResponse
from ..protocol.rest_codec import decode_infer_request, dumps, encode_infer_response, loads_json, parse_json_length
from .cloudevents import decode_cloudevent, encode_cloudevent
from .responder import JSON, Reply

BINARY_HEADER = "Inference-Header-Content-Length"
OCTET_STREAM = "application/octet-stream"


def cloudevent_reply(response: Any, event: Tuple[Any, Dict[str, Any], str], model_name: str,
                     headers: Dict[str, str]) -> Reply:
    """``response`` as a CloudEvent in the mode of the request ``event`` (see cloudevents.py)."""
    body, event_headers = encode_cloudevent(response, event[1], event[2], model_name)
    content_type = event_headers.pop("content-type")
    return Reply(body, content_type, {**headers, **event_headers})


async def infer_v2(dataplane: DataPlane, name: str, version: Optional[str], call: Call, body: bytes,
                   headers: HTTPHeaders) -> Reply:
    """Open Inference Protocol ``infer``: a JSON, binary-extension or CloudEvent request. ``headers`` are the
    HTTP request's; the model receives the call's."""
    model = await dataplane.ready_model(name, version)  # 404 (model or version) before the body is decoded
    event = decode_cloudevent(body, headers)
    if event is None:
        # the codec itself, rather than InferRequest.from_bytes's import of it on every call
        json_length = parse_json_length(headers.get(BINARY_HEADER), len(body))
        request = decode_infer_request(InferRequest, body, json_length, name)
    else:  # JSON event data is a v2 request; other data (e.g. Avro) goes to the model as bytes
        request = event[0] if isinstance(event[0], bytes) else InferRequest.from_dict(event[0], name)
    if not isinstance(request, bytes):
        request.model_version = version
        if request.request_outputs:
            check_class_counts(request.request_outputs)  # before the model runs
    response, reply_headers = await dataplane.infer(name, request, call.headers, model, call)
    if not isinstance(request, bytes):
        response = v2_answer(request, response, model, call.request_id)
    if event is not None:
        return cloudevent_reply(response, event, name, reply_headers)
    if isinstance(response, InferResponse):
        payload, out_length = encode_model_answer(name, encode_infer_response, response)
    elif isinstance(response, (bytes, bytearray)):
        payload, out_length = bytes(response), None
    else:  # the same rule as gRPC's
        raise not_a_v2_response(name, response)
    if out_length is None:
        return Reply(payload, JSON, reply_headers)
    return Reply(payload, OCTET_STREAM, {**reply_headers, BINARY_HEADER: str(out_length)})


def v2_answer(request: InferRequest, response: Any, model: Any, request_id: str) -> Any:
    """A model's answer to a v2 ``infer`` call as the client receives it, over REST and gRPC alike: with an id
    (the request's, else the call's ``x-request-id``) and the classes the request asked for in place of the
    outputs it asked them of (Triton's classification extension; labels from the model's ``labels``)."""
    if isinstance(response, InferResponse):
        if not response.id:
            response.id = request_id
        if request.request_outputs:
            classify_requested(response, request.request_outputs, getattr(model, "labels", None))
    return response


async def call_v1(dataplane: DataPlane, verb: str, name: str, call: Call, body: bytes, headers: HTTPHeaders,
                  event: Optional[Tuple[Any, Dict[str, Any], str]] = None) -> Reply:
    """KServe v1 ``predict`` or ``explain`` (``verb``) with a JSON or CloudEvent body, answered at once.

    ``event`` is the request's decoded CloudEvent when the caller has decoded it already.
    """
    model = await dataplane.ready_model(name)  # 404 before the body is decoded
    if not body:
        raise InvalidInput("the request body is empty")
    if event is None:
        event = decode_cloudevent(body, headers)
    request = loads_json(body) if event is None else event[0]
    run = dataplane.infer if verb == "predict" else dataplane.explain
    response, reply_headers = await run(name, request, call.headers, model, call)
    if event is not None:
        return cloudevent_reply(response, event, name, reply_headers)
    payload, content_type = encode_model_answer(name, encode_v1_response, response)
    return Reply(payload, content_type, reply_headers)


def encode_v1_response(response: Any) -> Tuple[bytes, str]:
    """The body and content type for whatever a v1 model returned."""
    if isinstance(response, (bytes, bytearray, memoryview)):
        return bytes(response), OCTET_STREAM
    if isinstance(response, str):
        return response.encode("utf-8"), "text/plain; charset=utf-8"
    if isinstance(response, InferResponse):
        return encode_infer_response(response)[0], JSON
    return dumps(response), JSON
