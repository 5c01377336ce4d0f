"""The v2 ``GRPCInferenceService`` on grpc.aio: decode each message, call the data plane, encode.

Errors are answered with the status code their type names (NOT_FOUND, UNAVAILABLE, INVALID_ARGUMENT,
UNIMPLEMENTED, INTERNAL) and the same message REST gives.
"""
import functools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict

import grpc
from google.protobuf import json_format

from .. import metrics
from ..dataplane import DataPlane
from ..errors import InferenceError, InvalidInput, grpc_code_of, status_of
from ..logging import logger
from ..protocol.grpc import grpc_predict_v2_pb2 as pb
from ..protocol.grpc.convert import Undecodable, infer_response_to_grpc, tolerant_parser
from ..protocol.grpc.grpc_predict_v2_pb2_grpc import (
    GRPCInferenceServiceServicer, add_GRPCInferenceServiceServicer_to_server,
)
from ..protocol.infer_type import InferRequest, InferResponse


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
            if isinstance(request, Undecodable):
                raise InvalidInput(request.reason)
            return await method(self, request, context)
        except Exception as e:  # every error answers the client; the server goes on
            code = _status(e)
            if code is grpc.StatusCode.INTERNAL:
                logger.error("gRPC %s failed: %s", method.__name__, e, exc_info=e)
            retry_after = getattr(e, "retry_after", None)
            await context.abort(code, _message(e),
                                trailing_metadata=(("retry-after", str(retry_after)),) if retry_after else ())
        finally:
            model = self.dataplane.model_label(getattr(request, "model_name", None) or getattr(request, "name", None))
            metrics.request_finished(model, "grpc", method.__name__, code.name, time.perf_counter() - start)

    return wrapper


def request_headers(context) -> Dict[str, str]:
    """Invocation metadata as the lowercase headers dict models receive."""
    return {key.lower(): value for key, value in (context.invocation_metadata() or ())}


def to_infer_response_message(response: Any, model_name: str = "", msg=None):
    """Whatever the data plane returned for a v2 call, as a ``ModelInferResponse`` (written into ``msg``
    when given)."""
    try:
        if isinstance(response, InferResponse):
            return infer_response_to_grpc(response, msg)
        if isinstance(response, dict):  # an InvalidInput here is the model's: it built the dict
            return infer_response_to_grpc(InferResponse.from_rest(response), msg)
    except InvalidInput:
        if isinstance(response, InferResponse):
            raise  # e.g. a requested output the model does not have: the client's
        raise InferenceError(f"model '{model_name}' returned a response that cannot be encoded: "
                             f"{sys.exc_info()[1]}") from None
    except (TypeError, ValueError, OverflowError, UnicodeError) as e:
        raise InferenceError(f"model '{model_name}' returned a response that cannot be encoded: {e}") from None
    raise InferenceError(f"model '{model_name}' returned {type(response).__name__}, which gRPC cannot carry")


def _tagged(message, request):
    """A response carrying its request's id, model name and version unless the model set its own."""
    message.id = message.id or request.id
    message.model_name = message.model_name or request.model_name
    message.model_version = message.model_version or request.model_version
    return message


def _stream_message(item: Any, request):
    """One streamed answer to ``request`` as a ``ModelStreamInferResponse``, tagged with the request's id
    and model. Its ``infer_response`` is filled in place: no copy of each response into its wrapper."""
    message = pb.ModelStreamInferResponse()
    _tagged(to_infer_response_message(item, request.model_name, message.infer_response), request)
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

    @answers_errors
    async def ModelInfer(self, request, context):
        model = await self.dataplane.ready_model(request.model_name)  # NOT_FOUND before decoding the tensors
        infer_request = InferRequest.from_grpc(request)
        headers = request_headers(context)
        request_id = self.dataplane.request_id(headers)
        response, response_headers = await self.dataplane.infer(request.model_name, infer_request, headers, model)
        trailing = [(k.lower(), str(v)) for k, v in response_headers.items()]
        trailing.append(("x-request-id", request_id))
        context.set_trailing_metadata(tuple(trailing))
        return to_infer_response_message(response, request.model_name)

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
            items = self.dataplane.stream(request.model_name, InferRequest.from_grpc(request), headers,
                                          protocol="grpc")
            async for item in items:
                yield _stream_message(item, request)
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
            yield InferRequest.from_grpc(first)
            async for request in requests:
                yield InferRequest.from_grpc(request)

        try:
            async for item in self.dataplane.stream_in(first.model_name, decoded(), headers, protocol="grpc"):
                yield _stream_message(item, first)
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

    @answers_errors
    async def ModelStatistics(self, request, context):
        stats = self.dataplane.model_statistics(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    @answers_errors
    async def SystemSharedMemoryStatus(self, request, context):
        Region = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(regions={
            r["name"]: Region(name=r["name"], key=r["key"], offset=r["offset"], byte_size=r["byte_size"])
            for r in self.dataplane.shared_memory_status(request.name)})

    @answers_errors
    async def SystemSharedMemoryRegister(self, request, context):
        await self.dataplane.register_shared_memory(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @answers_errors
    async def SystemSharedMemoryUnregister(self, request, context):
        await self.dataplane.unregister_shared_memory(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()


class _TolerantRegistration:
    """Stands in for the server while the generated code registers the service: each method's request
    parser is replaced by one that hands an undecodable message to the method (as :class:`Undecodable`)."""

    def __init__(self, server: grpc.aio.Server):
        self._server = server

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass  # registered below, from the same method table, with the tolerant parsers

    def add_registered_method_handlers(self, service: str, handlers: Dict[str, Any]) -> None:
        message_types = {m.name: m.input_type.name for m in pb.DESCRIPTOR.services_by_name[
            service.rpartition(".")[2]].methods} if service.endswith("GRPCInferenceService") else {}
        tolerant = {}
        for name, handler in handlers.items():
            message_class = getattr(pb, message_types.get(name, ""), None)
            tolerant[name] = handler._replace(request_deserializer=tolerant_parser(message_class)) \
                if message_class is not None else handler
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, tolerant),))
        self._server.add_registered_method_handlers(service, tolerant)


async def start_grpc_server(dataplane: DataPlane, port: int, max_threads: int, max_send: int,
                            max_receive: int, reuse_port: bool = False) -> grpc.aio.Server:
    """Start the gRPC server on ``port`` (all interfaces) on the running loop; workers share the port
    with ``reuse_port``."""
    server = grpc.aio.server(
        migration_thread_pool=ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="grpc"),
        options=[("grpc.max_send_message_length", max_send), ("grpc.max_receive_message_length", max_receive),
                 ("grpc.so_reuseport", int(reuse_port))],
    )
    add_GRPCInferenceServiceServicer_to_server(InferenceServicer(dataplane), _TolerantRegistration(server))
    server.add_insecure_port(f"[::]:{port}")
    await server.start()
    return server
