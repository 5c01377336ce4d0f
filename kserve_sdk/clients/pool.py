"""The process's pooled predictor clients: one per (protocol, host, TLS, timeout, retries).

Every worker process keeps its own pool; the server closes them on shutdown (:func:`close_clients`).
"""
from typing import Any, Dict, Tuple

from .rest import InferenceRESTClient, RESTConfig

_clients: Dict[Tuple, Any] = {}


def rest_client(protocol: str, timeout: float, retries: int) -> InferenceRESTClient:
    """The process's pooled REST client for these settings."""
    key = ("rest", protocol, timeout, retries)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = InferenceRESTClient(RESTConfig(protocol=protocol, timeout=timeout, retries=retries))
    return client


def grpc_client(host: str, use_ssl: bool, timeout: float, retries: int):
    """The process's pooled gRPC client (an InferenceGRPCClient) for these settings."""
    key = ("grpc", host, use_ssl, timeout, retries)
    client = _clients.get(key)
    if client is None:
        from .grpc import InferenceGRPCClient  # grpc and its messages load only when a predictor speaks gRPC

        client = _clients[key] = InferenceGRPCClient(host, use_ssl=use_ssl, timeout=timeout, retries=retries)
    return client


def keep(client: Any) -> None:
    """Have :func:`close_clients` close ``client`` too: one made outside this pool (a proxy model's)."""
    _clients[("kept", id(client))] = client


async def close_clients() -> None:
    """Close every pooled client (on shutdown)."""
    for client in list(_clients.values()):
        await client.close()
    _clients.clear()
