"""The restricted groups and the audit log on gRPC, as wrappers of the v2 service's method handlers.

``handlers/grpc.py`` hands the service's method table (method name -> ``grpc.RpcMethodHandler``) to the
function :func:`method_wrapper` returns, once at start-up: only the methods of a restricted group and the
management methods get a wrapper, so the others cost nothing more per call.

- A restricted method called without the metadata opens its call (counted, logged by the rule every failure
  follows) and is answered PERMISSION_DENIED with the call's request id.
- A management call (load, unload, a settings change, shared-memory registration) writes one audit line
  when it ends; its request id (the client's ``x-request-id`` or one minted for it) is the one the call's
  log lines and its trailing metadata carry, on success too.
"""
import asyncio
from typing import Any, Callable, Dict, Optional

import grpc

from ..errors import PermissionDenied
from ..lifecycle import take_request_id
from .audit import audit, changes_settings, is_audited_grpc
from .restricted import Restriction, grpc_group

#: method name -> grpc.RpcMethodHandler
MethodHandlers = Dict[str, Any]


def method_wrapper(dataplane: Any, by_group: Dict[str, Restriction]) -> Callable[[MethodHandlers], MethodHandlers]:
    """What wraps the service's method table: the restrictions ``by_group`` and the audit log."""

    def wrap(handlers: MethodHandlers) -> MethodHandlers:
        wrapped = {}
        for method, handler in handlers.items():
            restriction = by_group.get(grpc_group(method) or "")
            if restriction is not None:
                handler = _restricted(handler, method, restriction, dataplane)
            if is_audited_grpc(method) and handler.unary_unary is not None:
                handler = _audited(handler, method)
            wrapped[method] = handler
        return wrapped

    return wrap


def _metadata(context: Any) -> Dict[str, str]:
    return dict(context.invocation_metadata() or ())


def _model_of(request: Any) -> Optional[str]:
    return getattr(request, "model_name", None) or getattr(request, "name", None) if request is not None else None


def _restricted(handler: Any, method: str, restriction: Restriction, dataplane: Any) -> Any:
    """``handler`` answering PERMISSION_DENIED to calls without the restriction's metadata."""

    async def refuse(request: Any, context: Any) -> None:
        call = dataplane.open_call("grpc", method, _metadata(context), _model_of(request))
        failure = call.failed(PermissionDenied(restriction.grpc_message()), f"gRPC {method}")
        call.close(failure.grpc_code)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, failure.message,
                            trailing_metadata=(("x-request-id", call.request_id),))

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def guarded_unary(request: Any, context: Any) -> Any:
            if restriction.allows_grpc(_metadata(context)):
                return await unary(request, context)
            await refuse(request, context)

        return handler._replace(unary_unary=guarded_unary)
    if handler.stream_stream is not None:
        stream = handler.stream_stream

        async def guarded_stream(request_iterator: Any, context: Any) -> Any:
            if not restriction.allows_grpc(_metadata(context)):
                await refuse(None, context)
                return
            async for message in stream(request_iterator, context):
                yield message

        return handler._replace(stream_stream=guarded_stream)
    return handler


class _NamedContext:
    """A management call's servicer context: its invocation metadata holds the call's ``x-request-id`` (the
    client's, or minted here), which its trailing metadata returns; it notes the code the call aborts with."""

    def __init__(self, context: Any):
        self._context = context
        headers = _metadata(context)
        self.request_id = take_request_id(headers)
        self._headers = tuple(headers.items())
        self.code_name: Optional[str] = None
        context.set_trailing_metadata((("x-request-id", self.request_id),))

    def invocation_metadata(self) -> Any:
        return self._headers

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        self.code_name = code.name
        await self._context.abort(code, details, trailing_metadata)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _audited(handler: Any, method: str) -> Any:
    """``handler`` writing an audit line when a call that changes the server's state ends."""
    unary = handler.unary_unary

    async def audited(request: Any, context: Any) -> Any:
        if not changes_settings(method, request):
            return await unary(request, context)
        named = _NamedContext(context)
        outcome = "UNKNOWN"
        try:
            response = await unary(request, named)
            outcome = "OK"
            return response
        except asyncio.CancelledError:
            outcome = "CANCELLED"
            raise
        except BaseException:
            outcome = named.code_name or "UNKNOWN"
            raise
        finally:
            model = _model_of(request)
            audit(named.request_id, context.peer(), f"gRPC {method}" + (f" {model}" if model else ""), outcome)

    return handler._replace(unary_unary=audited)
