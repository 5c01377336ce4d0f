"""The v2 ``GRPCInferenceService`` on grpc.aio: decode each message, call the data plane, encode.

Errors are answered with the status code their type names (NOT_FOUND, UNAVAILABLE, INVALID_ARGUMENT,
UNIMPLEMENTED, INTERNAL) and the same message REST gives.
"""
import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable, Dict, Tuple

import grpc
from google.protobuf import json_format

from .. import tracing
from ..dataplane import DataPlane, encode_model_answer, not_a_v2_response
from ..errors import InvalidInput
from ..lifecycle import Call, Failure, take_request_id
from ..protocol.grpc import grpc_predict_v2_pb2 as pb
from ..protocol.grpc.convert import (
    Undecodable,
    infer_request_from_grpc,
    infer_response_to_grpc,
    log_settings_response,
    model_config_response,
    parameters_to_dict,
    tolerant_parser,
    trace_settings_response,
    trace_update_from_grpc,
    wants_empty_final_response,
    with_final_response,
)
from ..protocol.grpc.grpc_predict_v2_pb2_grpc import (
    GRPCInferenceServiceServicer,
    add_GRPCInferenceServiceServicer_to_server,
)
from ..protocol.infer_type import InferRequest, InferResponse
from ..tracing import answer_traceparent
from ..triton import cuda_shared_memory
from .inference import v2_answer


def call_metadata(call: Call) -> Tuple[Tuple[str, str], ...]:
    """The trailing metadata naming the call: its request id and, when it is traced, its traceparent."""
    if call.span is not None and (traceparent := answer_traceparent(call)):
        return (("x-request-id", call.request_id), ("traceparent", traceparent))
    return (("x-request-id", call.request_id),)


def error_metadata(call: Call, failure: Failure) -> Tuple[Tuple[str, str], ...]:
    """The trailing metadata of an error answer: the call's ids and, for a busy server, Retry-After."""
    request_id = call_metadata(call)
    return request_id if failure.retry_after is None else (*request_id, ("retry-after", str(failure.retry_after)))


def answers_errors(method):
    """Run a unary RPC inside its call's lifecycle (the method receives the :class:`Call` last): any
    exception aborts the call with its status code, message and request id."""
    endpoint = method.__name__

    @functools.wraps(method)
    async def wrapper(self, request, context):
        model_name = getattr(request, "model_name", None) or getattr(request, "name", None)
        call = self.dataplane.open_call("grpc", endpoint, request_headers(context), model_name)
        code = "OK"
        try:
            if isinstance(request, Undecodable):
                raise InvalidInput(request.reason)
            return await method(self, request, context, call)
        except asyncio.CancelledError:  # the client went away (grpc.aio cancels the RPC's task)
            code = "CANCELLED"
            raise
        except Exception as e:  # every error answers the client; the server goes on
            failure = call.failed(e, f"gRPC {endpoint}")
            code = failure.grpc_code
            await context.abort(grpc.StatusCode[code], failure.message, trailing_metadata=error_metadata(call, failure))
        finally:
            call.close(code)

    return wrapper


def request_headers(context) -> Dict[str, str]:
    """Invocation metadata as the lowercase headers dict models receive (gRPC keys are lowercase already:
    its core refuses others)."""
    return dict(context.invocation_metadata() or ())


def to_infer_response_message(response: Any, model_name: str = "", msg=None):
    """Whatever the data plane returned for a v2 call, as a ``ModelInferResponse`` (written into ``msg``
    when given); anything else is refused by the rule REST applies too."""
    if not isinstance(response, InferResponse):
        raise not_a_v2_response(model_name, response)
    return encode_model_answer(model_name, infer_response_to_grpc, response, msg)


def _tagged(message, request):
    """A response carrying its request's id, model name and version unless the model set its own. A field
    is written only when it changes: each write of a string field copies it, once per streamed message."""
    if not message.id:
        message.id = request.id
    if not message.model_name:
        message.model_name = request.model_name
    if not message.model_version and request.model_version:
        message.model_version = request.model_version
    return message


def _stream_message(item: Any, request):
    """One streamed answer to ``request`` as a ``ModelStreamInferResponse``, tagged with the request's id
    and model. Its ``infer_response`` is filled in place: no copy of each response into its wrapper."""
    message = pb.ModelStreamInferResponse()
    _tagged(to_infer_response_message(item, request.model_name, message.infer_response), request)
    return message


async def _within(call: Call, messages: AsyncIterator[Any], error_answer: Callable[[str], Any]) -> AsyncIterator[Any]:
    """A streamed answer inside its call's lifecycle: a failure becomes the stream's last message
    (``error_answer(message)``), and the stream of the RPC goes on; the call closes with its status."""
    code = "OK"
    try:
        async for message in messages:
            yield message
    except Exception as e:
        failure = call.failed(e, "gRPC ModelStreamInfer")
        code = failure.grpc_code
        yield error_answer(failure.message)
    except BaseException:  # the client went away (the RPC was cancelled, or the stream closed early)
        code = "CANCELLED"
        raise
    finally:
        call.close(code)


async def _send_initial_metadata(context, call: Call) -> None:
    """A stream's initial metadata, naming its first call (request id, traceparent); that call is closed as
    CANCELLED when the client has gone before it could be sent (its answers never start, nor close it)."""
    try:
        await context.send_initial_metadata(call_metadata(call))
    except BaseException:
        call.close("CANCELLED")
        raise


#: The RPCs whose calls are never traced: health, readiness and the trace settings.
UNTRACED = frozenset({"ServerLive", "ServerReady", "ModelReady", "TraceSetting"})


class InferenceServicer(GRPCInferenceServiceServicer):
    """Adapts the v2 gRPC service to the data plane."""

    def __init__(self, dataplane: DataPlane):
        self.dataplane = dataplane

    @answers_errors
    async def ServerLive(self, request, context, call):
        await self.dataplane.live()
        return pb.ServerLiveResponse(live=True)

    @answers_errors
    async def ServerReady(self, request, context, call):
        return pb.ServerReadyResponse(ready=await self.dataplane.ready())

    @answers_errors
    async def ModelReady(self, request, context, call):
        return pb.ModelReadyResponse(ready=await self.dataplane.model_ready(request.name, request.version))

    @answers_errors
    async def ServerMetadata(self, request, context, call):
        meta = self.dataplane.metadata()
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"], extensions=meta["extensions"])

    @answers_errors
    async def ModelMetadata(self, request, context, call):
        meta = await self.dataplane.model_metadata(request.name, request.version or None)

        def tensors(items):
            return [pb.ModelMetadataResponse.TensorMetadata(name=t["name"], datatype=t["datatype"],
                                                            shape=t["shape"]) for t in items]

        return pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"],
                                        inputs=tensors(meta["inputs"]), outputs=tensors(meta["outputs"]))

    @answers_errors
    async def ModelInfer(self, request, context, call):
        model = await self.dataplane.ready_model(request.model_name, request.model_version or None)  # NOT_FOUND first
        infer_request = infer_request_from_grpc(InferRequest, request)
        response, response_headers = await self.dataplane.infer(request.model_name, infer_request, call.headers,
                                                                model, call)
        request_id = (("x-request-id", call.request_id),) if call.span is None else call_metadata(call)
        context.set_trailing_metadata(request_id if not response_headers else
                                      (*((k.lower(), str(v)) for k, v in response_headers.items()), *request_id))
        return to_infer_response_message(v2_answer(infer_request, response, model, call.request_id),
                                         request.model_name)

    async def ModelStreamInfer(self, request_iterator, context):
        """Answer each request of the call in order, all of a streaming model's responses tagged with the
        request's id; a failed request gets ``error_message`` and the stream goes on. A model that
        consumes streams (``predict_stream``) receives the call's requests as one iterator.

        Each request is a call of its own (counted, timed, in flight while it is answered), all with the
        RPC's request id, which the initial metadata returns, with the first call's traceparent when it is
        traced."""
        headers = request_headers(context)
        request_id = take_request_id(headers)
        requests = request_iterator.__aiter__()
        first = await anext(requests, None)
        if first is None:
            await context.send_initial_metadata((("x-request-id", request_id),))
            return
        model = self.dataplane.model_registry.get_model(first.model_name)
        consumes = model is not None and getattr(model, "streams_requests", bool)()
        call, messages = self._stream_in(first, requests, headers) if consumes else \
            self._stream_one(first, dict(headers))
        await _send_initial_metadata(context, call)
        async for message in messages:
            yield message
        while not consumes and (pending := await anext(requests, None)) is not None:
            async for message in self._stream_one(pending, dict(headers))[1]:
                yield message

    def _stream_one(self, request, headers: Dict[str, str]) -> Tuple[Call, AsyncIterator[Any]]:
        call = self.dataplane.open_call("grpc", "ModelStreamInfer", headers, request.model_name)

        async def answers():  # decoding inside the call: a bad request is answered like a model's failure
            infer_request = infer_request_from_grpc(InferRequest, request)
            items = self.dataplane.stream(request.model_name, infer_request, headers, call=call)
            async for item in items:
                yield _stream_message(item, request)

        messages = _within(call, answers(), lambda message: pb.ModelStreamInferResponse(
            error_message=message, infer_response=_tagged(pb.ModelInferResponse(), request)))
        return call, with_final_response(request, messages) if wants_empty_final_response(request) else messages

    def _stream_in(self, first, requests, headers: Dict[str, str]) -> Tuple[Call, AsyncIterator[Any]]:
        async def decoded():
            yield infer_request_from_grpc(InferRequest, first)
            async for request in requests:
                yield infer_request_from_grpc(InferRequest, request)

        call = self.dataplane.open_call("grpc", "ModelStreamInfer", headers, first.model_name)
        items = self.dataplane.stream_in(first.model_name, decoded(), headers, call=call)
        return call, _within(call, (_stream_message(item, first) async for item in items),
                             lambda message: pb.ModelStreamInferResponse(error_message=message))

    @answers_errors
    async def TraceSetting(self, request, context, call):
        update = trace_update_from_grpc(request)
        settings = await self.dataplane.update_trace_settings(request.model_name, update) if update else \
            self.dataplane.trace_settings(request.model_name)
        return trace_settings_response(settings)

    @answers_errors
    async def RepositoryIndex(self, request, context, call):
        entries = await self.dataplane.repository_index()
        return pb.RepositoryIndexResponse(models=[
            pb.RepositoryIndexResponse.ModelIndex(name=e["name"], version=e.get("version", ""),
                                                  state=e.get("state", ""), reason=e.get("reason", ""))
            for e in entries if not request.ready or e.get("state") == "READY"])

    @answers_errors
    async def RepositoryModelLoad(self, request, context, call):
        await self.dataplane.load(request.model_name, parameters_to_dict(request.parameters))
        return pb.RepositoryModelLoadResponse()

    @answers_errors
    async def RepositoryModelUnload(self, request, context, call):
        await self.dataplane.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    @answers_errors
    async def ModelStatistics(self, request, context, call):
        stats = self.dataplane.model_statistics(request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    @answers_errors
    async def SystemSharedMemoryStatus(self, request, context, call):
        Region = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(regions={
            r["name"]: Region(name=r["name"], key=r["key"], offset=r["offset"], byte_size=r["byte_size"])
            for r in self.dataplane.shared_memory_status(request.name)})

    @answers_errors
    async def SystemSharedMemoryRegister(self, request, context, call):
        await self.dataplane.register_shared_memory(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @answers_errors
    async def SystemSharedMemoryUnregister(self, request, context, call):
        await self.dataplane.unregister_shared_memory(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # Triton's CUDA shared memory, answered without a GPU (the logic: triton/cuda_shared_memory.py)
    @answers_errors
    async def CudaSharedMemoryStatus(self, request, context, call):
        Region = pb.CudaSharedMemoryStatusResponse.RegionStatus
        return pb.CudaSharedMemoryStatusResponse(regions={
            r["name"]: Region(**r) for r in cuda_shared_memory.status(self.dataplane.shared_memory.allowed,
                                                                       request.name)})

    @answers_errors
    async def CudaSharedMemoryRegister(self, request, context, call):
        cuda_shared_memory.register(self.dataplane.shared_memory.allowed, request.name)

    @answers_errors
    async def CudaSharedMemoryUnregister(self, request, context, call):
        cuda_shared_memory.unregister(self.dataplane.shared_memory.allowed, request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # Triton's logging and model configuration extensions (the logic: log_settings.py, model_config.py)
    @answers_errors
    async def LogSettings(self, request, context, call):
        changes = parameters_to_dict(request.settings)  # an empty request reads the settings
        return log_settings_response(self.dataplane.log_settings() if changes is None else
                                     await self.dataplane.update_log_settings(changes))

    @answers_errors
    async def ModelConfig(self, request, context, call):
        return model_config_response(await self.dataplane.model_config(request.name, request.version or None))


class _TolerantRegistration:
    """Stands in for the server while the generated code registers the service: each method's request
    parser is replaced by one that hands an undecodable message to the method (as :class:`Undecodable`).

    The methods are served through one generic handler only, never registered one by one: grpc.aio keeps
    a pending task per registered method and, for every call that arrives, waits on all of them with
    ``asyncio.wait``, which costs more than our whole data plane (the figure is in docs/performance.md,
    "Figures moved from code comments"). A generic handler is a dict look-up.
    """

    def __init__(self, server: grpc.aio.Server, wrap_methods: Callable[[Dict[str, Any]], Dict[str, Any]] | None = None):
        self._server = server
        self._wrap_methods = wrap_methods  # the restricted groups and the audit log (kserve_sdk/security)

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass  # registered below, from the same method table, with the tolerant parsers

    def add_registered_method_handlers(self, service: str, handlers: Dict[str, Any]) -> None:
        """Serve ``handlers`` (the generated table) through one generic handler, with tolerant parsers."""
        message_types = {m.name: m.input_type.name for m in pb.DESCRIPTOR.services_by_name[
            service.rpartition(".")[2]].methods} if service.endswith("GRPCInferenceService") else {}
        tolerant = {}
        for name, handler in handlers.items():
            message_class = getattr(pb, message_types.get(name, ""), None)
            tolerant[name] = handler._replace(request_deserializer=tolerant_parser(message_class)) \
                if message_class is not None else handler
        if self._wrap_methods is not None:
            tolerant = self._wrap_methods(tolerant)
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, tolerant),))


#: Calls gRPC core holds for the server before the event loop takes them (its own default cancels beyond 3,000).
PENDING_CALLS = 1 << 16


async def start_grpc_server(dataplane: DataPlane, port: int, max_threads: int, max_send: int,
                            max_receive: int, reuse_port: bool = False,
                            credentials: grpc.ServerCredentials | None = None,
                            wrap_methods: Callable[[Dict[str, Any]], Dict[str, Any]] | None = None) -> grpc.aio.Server:
    """Start the gRPC server on ``port`` (all interfaces) on the running loop; workers share the port
    with ``reuse_port``; TLS with ``credentials``; ``wrap_methods`` may wrap the method table (name ->
    ``grpc.RpcMethodHandler``) once, before it is served."""
    server = grpc.aio.server(
        migration_thread_pool=ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="grpc"),
        options=[("grpc.max_send_message_length", max_send), ("grpc.max_receive_message_length", max_receive),
                 ("grpc.so_reuseport", int(reuse_port)),
                 # gRPC core cancels the calls of a burst beyond 3,000 not yet taken by the loop; a model's
                 # queue (max_queue_size) is where waiting calls are bounded, so let a burst reach it
                 ("grpc.server.max_pending_requests", PENDING_CALLS),
                 ("grpc.server.max_pending_requests_hard_limit", PENDING_CALLS)],
    )
    add_GRPCInferenceServiceServicer_to_server(InferenceServicer(dataplane),
                                               _TolerantRegistration(server, wrap_methods))
    tracing.untraced.update(UNTRACED)
    if credentials is None:
        server.add_insecure_port(f"[::]:{port}")
    else:
        server.add_secure_port(f"[::]:{port}", credentials)
    await server.start()
    return server
