"""The v2 ``GRPCInferenceService`` on grpc.aio: decode each message, call the data plane, encode.

Errors are answered with the status code their type names (NOT_FOUND, UNAVAILABLE, INVALID_ARGUMENT,
UNIMPLEMENTED, INTERNAL) and the same message REST gives.
"""
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict

import grpc

from .. import metrics
from ..dataplane import DataPlane
from ..errors import InferenceError, grpc_code_of, status_of
from ..logging import logger
from ..protocol.grpc import grpc_predict_v2_pb2 as pb
from ..protocol.grpc.convert import infer_request_from_grpc, infer_response_to_grpc
from ..protocol.grpc.grpc_predict_v2_pb2_grpc import (
    GRPCInferenceServiceServicer, add_GRPCInferenceServiceServicer_to_server,
)
from ..protocol.infer_type import InferResponse
from ..protocol.rest_codec import decode_infer_response


def _status(exc: BaseException) -> grpc.StatusCode:
    return grpc.StatusCode[grpc_code_of(exc)]


def _message(exc: BaseException) -> str:
    """The client-facing message: the one REST gives (e.g. "RuntimeError : kaboom" for a model's bug)."""
    return status_of(exc)[1]


def answers_errors(method):
    """Turn any exception of a unary RPC into an aborted call with its status code and message,
    and count the call in the request metrics."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        start = time.perf_counter()
        metrics.request_started("grpc")
        code = grpc.StatusCode.OK
        try:
            return await method(self, request, context)
        except Exception as e:  # every error answers the client; the server goes on
            code = _status(e)
            if code is grpc.StatusCode.INTERNAL:
                logger.error("gRPC %s failed: %s", method.__name__, e, exc_info=e)
            await context.abort(code, _message(e))
        finally:
            model = self.dataplane.model_label(getattr(request, "model_name", None) or getattr(request, "name", None))
            metrics.request_finished(model, "grpc", method.__name__, code.name, time.perf_counter() - start)

    return wrapper


def request_headers(context) -> Dict[str, str]:
    """Invocation metadata as the lowercase headers dict models receive."""
    return {key.lower(): value for key, value in (context.invocation_metadata() or ())}


def to_infer_response_message(response: Any):
    """Whatever the data plane returned for a v2 call, as a ``ModelInferResponse``."""
    if isinstance(response, InferResponse):
        return infer_response_to_grpc(response)
    if isinstance(response, dict):
        return infer_response_to_grpc(decode_infer_response(response, b"", None))
    raise InferenceError(f"the model returned {type(response).__name__}, which gRPC cannot carry")


def _tagged(message, request):
    """A response carrying its request's id, model name and version unless the model set its own."""
    message.id = message.id or request.id
    message.model_name = message.model_name or request.model_name
    message.model_version = message.model_version or request.model_version
    return message


class InferenceServicer(GRPCInferenceServiceServicer):
    """Adapts the v2 gRPC service to the data plane."""

    def __init__(self, dataplane: DataPlane):
        self.dataplane = dataplane

    @answers_errors
    async def ServerLive(self, request, context):
        await self.dataplane.live()
        return pb.ServerLiveResponse(live=True)

    @answers_errors
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=await self.dataplane.ready())

    @answers_errors
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=await self.dataplane.model_ready(request.name))

    @answers_errors
    async def ServerMetadata(self, request, context):
        meta = self.dataplane.metadata()
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"], extensions=meta["extensions"])

    @answers_errors
    async def ModelMetadata(self, request, context):
        meta = await self.dataplane.model_metadata(request.name, request.version or None)

        def tensors(items):
            return [pb.ModelMetadataResponse.TensorMetadata(name=t["name"], datatype=t["datatype"],
                                                            shape=t["shape"]) for t in items]

        return pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"],
                                        inputs=tensors(meta["inputs"]), outputs=tensors(meta["outputs"]))

    async def _infer(self, request, context):
        await self.dataplane.ready_model(request.model_name)
        infer_request = infer_request_from_grpc(request)
        headers = request_headers(context)
        request_id = self.dataplane.request_id(headers)
        response, response_headers = await self.dataplane.infer(request.model_name, infer_request, headers)
        trailing = [(k.lower(), str(v)) for k, v in response_headers.items()]
        trailing.append(("x-request-id", request_id))
        context.set_trailing_metadata(tuple(trailing))
        return to_infer_response_message(response)

    @answers_errors
    async def ModelInfer(self, request, context):
        return await self._infer(request, context)

    async def ModelStreamInfer(self, request_iterator, context):
        """Answer each request of the call in order, all of a streaming model's responses tagged with the
        request's id; a failed request gets ``error_message`` and the stream goes on. A model that
        consumes streams (``predict_stream``) receives the call's requests as one iterator."""
        headers = request_headers(context)
        self.dataplane.request_id(headers)
        requests = request_iterator.__aiter__()
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            return
        model = self.dataplane.model_registry.get_model(first.model_name)
        if model is not None and getattr(model, "streams_requests", bool)():
            async for message in self._stream_in(first, requests, headers):
                yield message
            return
        pending = first
        while pending is not None:
            async for message in self._stream_one(pending, dict(headers)):
                yield message
            pending = await anext(requests, None)

    async def _stream_one(self, request, headers: Dict[str, str]):
        start, code = time.perf_counter(), grpc.StatusCode.OK
        try:
            items = self.dataplane.stream(request.model_name, infer_request_from_grpc(request), headers,
                                          protocol="grpc")
            async for item in items:
                yield pb.ModelStreamInferResponse(infer_response=_tagged(to_infer_response_message(item), request))
        except Exception as e:
            code = _status(e)
            if code is grpc.StatusCode.INTERNAL:
                logger.error("gRPC ModelStreamInfer failed: %s", e, exc_info=e)
            yield pb.ModelStreamInferResponse(error_message=_message(e),
                                              infer_response=_tagged(pb.ModelInferResponse(), request))
        finally:
            metrics.request_finished(self.dataplane.model_label(request.model_name), "grpc", "ModelStreamInfer",
                                     code.name, time.perf_counter() - start, started=False)

    async def _stream_in(self, first, requests, headers: Dict[str, str]):
        async def decoded():
            yield infer_request_from_grpc(first)
            async for request in requests:
                yield infer_request_from_grpc(request)

        try:
            async for item in self.dataplane.stream_in(first.model_name, decoded(), headers, protocol="grpc"):
                yield pb.ModelStreamInferResponse(infer_response=_tagged(to_infer_response_message(item), first))
        except Exception as e:
            yield pb.ModelStreamInferResponse(error_message=_message(e))

    @answers_errors
    async def RepositoryIndex(self, request, context):
        entries = await self.dataplane.repository_index()
        return pb.RepositoryIndexResponse(models=[
            pb.RepositoryIndexResponse.ModelIndex(name=e["name"], state=e["state"], reason=e.get("reason", ""))
            for e in entries if not request.ready or e["state"] == "READY"])

    @answers_errors
    async def RepositoryModelLoad(self, request, context):
        await self.dataplane.load(request.model_name)
        return pb.RepositoryModelLoadResponse()

    @answers_errors
    async def RepositoryModelUnload(self, request, context):
        await self.dataplane.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()


async def start_grpc_server(dataplane: DataPlane, port: int, max_threads: int, max_send: int,
                            max_receive: int, reuse_port: bool = False) -> grpc.aio.Server:
    """Start the gRPC server on ``port`` (all interfaces) on the running loop; workers share the port
    with ``reuse_port``."""
    server = grpc.aio.server(
        migration_thread_pool=ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="grpc"),
        options=[("grpc.max_send_message_length", max_send), ("grpc.max_receive_message_length", max_receive),
                 ("grpc.so_reuseport", int(reuse_port))],
    )
    add_GRPCInferenceServiceServicer_to_server(InferenceServicer(dataplane), server)
    server.add_insecure_port(f"[::]:{port}")
    await server.start()
    return server
