"""An async v2 gRPC client over one pooled channel (KServe's ``InferenceGRPCClient``)."""
import functools
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc

from ..errors import InvalidInput, UpstreamError, http_status_for_grpc
from ..protocol.grpc import grpc_predict_v2_pb2 as pb
from ..protocol.grpc.convert import infer_request_to_grpc
from ..protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from ..protocol.infer_type import InferRequest, InferResponse
from .defaults import USE_CLIENT_DEFAULT, _UseClientDefault, is_client_default
from .mismatch import ProtocolMismatch, is_http1_server

Timeout = Union[Optional[float], _UseClientDefault]
Metadata = Union[grpc.aio.Metadata, Sequence[Tuple[str, str]], Dict[str, str], None]


def _retry_config(retries: int) -> str:
    """A gRPC service config retrying calls that could not reach the server."""
    policy = {"maxAttempts": max(2, min(retries + 1, 5)), "initialBackoff": "0.05s", "maxBackoff": "1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    return json.dumps({"methodConfig": [{"name": [{"service": "inference.GRPCInferenceService"}],
                                          "retryPolicy": policy}]})


def _channel_options(channel_args: Optional[Sequence[Tuple[str, Any]]], retries: Optional[int]) -> List:
    """The caller's channel options, then ours for what they leave unsaid: no message size limits, and
    retries unless the caller turned them off or gave a service config of their own (as KServe does)."""
    options = list(channel_args or [])
    given = {name for name, _ in options}
    for name in ("grpc.max_send_message_length", "grpc.max_receive_message_length"):
        if name not in given:
            options.append((name, -1))
    if retries and ("grpc.enable_retries", 0) not in options and "grpc.service_config" not in given:
        if "grpc.enable_retries" not in given:
            options.append(("grpc.enable_retries", 1))
        options.append(("grpc.service_config", _retry_config(retries)))
    return options


@functools.cache
def _kserve_type(ours: type) -> type:
    """A subclass of ``ours`` (an UpstreamError) and of ``grpc.aio.AioRpcError``, the type KServe's client
    raises: ``code()``, ``details()`` and the metadata are the server's."""
    doc = f"{ours.__name__} that is also grpc.aio.AioRpcError, the type KServe's gRPC client raises."
    return type("AioRpcError", (ours, grpc.aio.AioRpcError), {"__module__": __name__, "__doc__": doc})


def kserve_error(ours: type, args: Tuple, rpc_error: grpc.aio.AioRpcError) -> UpstreamError:
    """``ours(*args)`` that is also an AioRpcError with ``rpc_error``'s code, details and metadata."""
    error = _kserve_type(ours)(*args)
    grpc.aio.AioRpcError.__init__(error, rpc_error.code(), rpc_error.initial_metadata(),
                                  rpc_error.trailing_metadata(), rpc_error.details(),
                                  rpc_error.debug_error_string())
    return error


def request_message(infer_request: Union[InferRequest, pb.ModelInferRequest],
                    model_name: Optional[str] = None) -> pb.ModelInferRequest:
    """The ``ModelInferRequest`` of ``infer_request``, named ``model_name`` when it names no model."""
    if isinstance(infer_request, InferRequest):
        message = infer_request_to_grpc(infer_request)
    elif isinstance(infer_request, pb.ModelInferRequest):
        message = infer_request
    else:
        raise InvalidInput("Invalid input format")
    if model_name and not message.model_name:
        message.model_name = model_name
    return message


class InferenceGRPCClient:
    """Calls a v2 gRPC server at ``url`` (host:port; a bare host is given port 443 with TLS, else 80).

    Args:
        url: host:port of the server.
        use_ssl: use TLS (with ``root_certificates``/``private_key``/``certificate_chain`` files).
        creds: TLS credentials to use instead of those files.
        channel_args: extra ``(name, value)`` channel options.
        timeout: seconds for one call; None for no limit.
        retries: extra attempts on UNAVAILABLE (not with ``("grpc.enable_retries", 0)`` or a
            ``grpc.service_config`` in ``channel_args``).

    Errors the server answers are raised as :class:`~kserve_sdk.errors.UpstreamError` that is also
    ``grpc.aio.AioRpcError`` (what KServe's client raises).
    """

    def __init__(self, url: str, verbose: bool = False, use_ssl: bool = False,
                 root_certificates: Optional[str] = None, private_key: Optional[str] = None,
                 certificate_chain: Optional[str] = None, creds: Optional[grpc.ChannelCredentials] = None,
                 channel_args: Optional[Sequence[Tuple[str, Any]]] = None, timeout: Optional[float] = 60,
                 retries: Optional[int] = 3):
        if ":" not in url:
            url = f"{url}:{443 if use_ssl else 80}"
        options = _channel_options(channel_args, retries)
        if use_ssl or creds:
            if creds is None:
                def read(path):
                    if path is None:
                        return None
                    with open(path, "rb") as f:
                        return f.read()
                creds = grpc.ssl_channel_credentials(read(root_certificates), read(private_key),
                                                     read(certificate_chain))
            self._channel = grpc.aio.secure_channel(url, creds, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(url, options=options)
        self._stub = GRPCInferenceServiceStub(self._channel)
        self._url = url
        self._timeout = timeout
        self._verbose = verbose

    async def __aenter__(self) -> "InferenceGRPCClient":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def _call(self, method, message, timeout: Timeout, headers: Metadata):
        try:
            return await method(message, timeout=self._timeout if is_client_default(timeout) else timeout,
                                metadata=_metadata(headers))
        except grpc.aio.AioRpcError as e:
            details = e.details() or ""
            if is_http1_server(details):
                mismatch = (self._url, "gRPC", "rest", f"[{e.code().name}] {details}")
                raise kserve_error(ProtocolMismatch, mismatch, e) from None
            raise kserve_error(UpstreamError, (http_status_for_grpc(e.code().name),
                                               f"[{e.code().name}] {details}"), e) from None

    async def infer(self, infer_request: Union[InferRequest, pb.ModelInferRequest],
                    timeout: Timeout = USE_CLIENT_DEFAULT, headers: Metadata = None) -> InferResponse:
        """Run inference on the model ``infer_request`` names; it is an InferRequest or a ``ModelInferRequest``.
        ``headers`` go as the call's metadata."""
        response = await self._call(self._stub.ModelInfer, request_message(infer_request), timeout, headers)
        return InferResponse.from_grpc(response)

    async def is_server_ready(self, timeout: Timeout = USE_CLIENT_DEFAULT, headers: Metadata = None) -> bool:
        """Whether the server is ready."""
        return (await self._call(self._stub.ServerReady, pb.ServerReadyRequest(), timeout, headers)).ready

    async def is_server_live(self, timeout: Timeout = USE_CLIENT_DEFAULT, headers: Metadata = None) -> bool:
        """Whether the server is live."""
        return (await self._call(self._stub.ServerLive, pb.ServerLiveRequest(), timeout, headers)).live

    async def is_model_ready(self, model_name: str, timeout: Timeout = USE_CLIENT_DEFAULT,
                             headers: Metadata = None) -> bool:
        """Whether ``model_name`` is ready."""
        request = pb.ModelReadyRequest(name=model_name)
        return (await self._call(self._stub.ModelReady, request, timeout, headers)).ready

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()


def _metadata(headers: Metadata) -> Optional[Tuple[Tuple[str, str], ...]]:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((str(k).lower(), str(v)) for k, v in items)
