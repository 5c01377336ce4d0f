"""An async v2 gRPC client over one pooled channel (KServe's ``InferenceGRPCClient``)."""
import json
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import grpc

from ..errors import UpstreamError, http_status_for_grpc
from ..protocol.grpc import grpc_predict_v2_pb2 as pb
from ..protocol.grpc.convert import infer_request_to_grpc
from ..protocol.grpc.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from ..protocol.infer_type import InferRequest, InferResponse
from .mismatch import ProtocolMismatch, is_http1_server


def _retry_config(retries: int) -> str:
    """A gRPC service config retrying calls that could not reach the server."""
    policy = {"maxAttempts": max(2, min(retries + 1, 5)), "initialBackoff": "0.05s", "maxBackoff": "1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    return json.dumps({"methodConfig": [{"name": [{"service": "inference.GRPCInferenceService"}],
                                          "retryPolicy": policy}]})


class InferenceGRPCClient:
    """Calls a v2 gRPC server at ``url`` (host:port).

    Args:
        url: host:port of the server.
        use_ssl: use TLS (with ``root_certificates``/``private_key``/``certificate_chain`` or ``creds``).
        timeout: seconds for one call.
        retries: extra attempts on UNAVAILABLE.
        channel_args: extra ``(name, value)`` channel options.
    """

    def __init__(self, url: str, verbose: bool = False, use_ssl: bool = False,
                 root_certificates: Optional[str] = None, private_key: Optional[str] = None,
                 certificate_chain: Optional[str] = None, creds: Optional[grpc.ChannelCredentials] = None,
                 channel_args: Optional[Sequence[Tuple[str, Any]]] = None, timeout: Optional[float] = 60,
                 retries: int = 3):
        options = list(channel_args or [])
        options += [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        if retries > 0:
            options += [("grpc.enable_retries", 1), ("grpc.service_config", _retry_config(retries))]
        if use_ssl or creds:
            if creds is None:
                def read(path):
                    return open(path, "rb").read() if path else None
                creds = grpc.ssl_channel_credentials(read(root_certificates), read(private_key),
                                                     read(certificate_chain))
            self._channel = grpc.aio.secure_channel(url, creds, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(url, options=options)
        self._stub = GRPCInferenceServiceStub(self._channel)
        self._url = url
        self._timeout = timeout
        self._verbose = verbose

    async def _call(self, method, message, timeout, headers):
        try:
            return await method(message, timeout=timeout or self._timeout, metadata=_metadata(headers))
        except grpc.aio.AioRpcError as e:
            details = e.details() or ""
            if is_http1_server(details):
                raise ProtocolMismatch(self._url, "gRPC", "rest", f"[{e.code().name}] {details}") from None
            raise UpstreamError(http_status_for_grpc(e.code().name), f"[{e.code().name}] {details}") from None

    async def infer(self, infer_request: Union[InferRequest, Any], timeout: Optional[float] = None,
                    headers: Union[Dict[str, str], Sequence[Tuple[str, str]], None] = None,
                    model_name: Optional[str] = None) -> InferResponse:
        """Run inference; ``infer_request`` is an InferRequest or a ``ModelInferRequest``."""
        message = infer_request_to_grpc(infer_request) if isinstance(infer_request, InferRequest) else infer_request
        if model_name and not message.model_name:
            message.model_name = model_name
        response = await self._call(self._stub.ModelInfer, message, timeout, headers)
        return InferResponse.from_grpc(response)

    async def is_server_ready(self, timeout: Optional[float] = None, headers=None) -> bool:
        """Whether the server is ready."""
        return (await self._call(self._stub.ServerReady, pb.ServerReadyRequest(), timeout, headers)).ready

    async def is_server_live(self, timeout: Optional[float] = None, headers=None) -> bool:
        """Whether the server is live."""
        return (await self._call(self._stub.ServerLive, pb.ServerLiveRequest(), timeout, headers)).live

    async def is_model_ready(self, model_name: str, timeout: Optional[float] = None, headers=None) -> bool:
        """Whether ``model_name`` is ready."""
        request = pb.ModelReadyRequest(name=model_name)
        return (await self._call(self._stub.ModelReady, request, timeout, headers)).ready

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()


def _metadata(headers) -> Optional[Tuple[Tuple[str, str], ...]]:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((str(k).lower(), str(v)) for k, v in items)
