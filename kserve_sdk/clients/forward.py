"""A transformer's default predict/explain: forward to the predictor/explainer over pooled clients.

The clients come from the process's pool (:mod:`.pool`). While tracing is on, each forwarded call is a
client span whose ``traceparent`` the predictor receives, so the client, the transformer and the
predictor share one trace.
"""
from typing import Any, Dict, Optional

from ..logging import logger
from ..predictor_config import PredictorConfig
from ..tracing import forwarding
from .mismatch import ProtocolMismatch
from .pool import grpc_client, rest_client


def _predictor_grpc_client(config: PredictorConfig) -> Any:
    """The pooled gRPC client of the predictor in ``config``."""
    return grpc_client(config.predictor_host or "", config.predictor_use_ssl,
                       config.predictor_request_timeout_seconds, config.predictor_request_retries)


async def forward_predict(model: Any, config: PredictorConfig, payload: Any, headers: Dict[str, str],
                          response_headers: Optional[Dict[str, str]]) -> Any:
    """Send ``payload`` to the predictor in ``config`` and return its answer. A predictor that speaks another
    protocol than ``--predictor_protocol`` is told as such (502), naming both and what came back."""
    host = config.predictor_host or ""  # Model.predict forwards only when there is one
    with forwarding(headers, model.name, host, config.predictor_protocol):
        try:
            if config.predictor_protocol == "grpc-v2":
                from .grpc import request_message  # grpc loads only for a predictor that speaks it

                client = _predictor_grpc_client(config)
                return await client.infer(request_message(payload, model.name), headers=headers)
            client = rest_client(config.predictor_protocol, config.predictor_request_timeout_seconds,
                                 config.predictor_request_retries)
            answered: Optional[Dict[str, str]] = None if response_headers is None else {}
            result = await client.infer(config.predictor_base_url, payload, model_name=model.name, headers=headers,
                                        response_headers=answered)
            if answered and response_headers is not None:
                response_headers.update(passed_on(answered))
            return result
        except ProtocolMismatch as e:
            raise e.for_transformer(config.predictor_protocol) from None


#: the predictor's headers that describe its own answer's bytes or connection, or that the transformer's
#: answer has of its own: not passed on to the transformer's caller
_NOT_PASSED_ON = frozenset({"content-length", "content-type", "content-encoding", "transfer-encoding", "connection",
                            "keep-alive", "inference-header-content-length", "date", "server", "x-request-id"})


def passed_on(predictor_headers: Dict[str, str]) -> Dict[str, str]:
    """The predictor's answer headers a transformer that returns response headers passes on to its caller
    (KServe's drops only Content-Length, and Content-Type over v2; the others left out here would misdescribe
    the transformer's own answer too)."""
    return {name: value for name, value in predictor_headers.items() if name not in _NOT_PASSED_ON}


async def forward_explain(model: Any, payload: Any, headers: Dict[str, str]) -> Any:
    """Send ``payload`` to the model's ``explainer_host`` (v1 ``:explain``)."""
    client = rest_client("v1", 600, 0)
    with forwarding(headers, model.name, model.explainer_host, "v1"):
        return await client.explain(f"http://{model.explainer_host}", model.name, payload, headers=headers)


async def predictor_ready(config: PredictorConfig, model_name: Optional[str] = None) -> bool:
    """Whether the predictor in ``config`` is ready (``--enable_predictor_health_check``, as KServe asks it):
    its model ``model_name``, or the predictor server itself when None (a v1 predictor has no readiness
    route: its liveness stands for it). A predictor that cannot be reached, or answers an error, is not ready."""
    try:
        if config.predictor_protocol == "grpc-v2":
            client = _predictor_grpc_client(config)
            return bool(await (client.is_server_ready() if model_name is None else client.is_model_ready(model_name)))
        client = rest_client(config.predictor_protocol, config.predictor_request_timeout_seconds, 0)
        base = config.predictor_base_url
        if model_name is not None:
            return bool(await client.is_model_ready(base, model_name))
        if config.predictor_protocol == "v1":
            return bool(await client.is_server_live(base))
        return bool(await client.is_server_ready(base))
    except Exception as e:  # every client error means the same here: the predictor is not ready
        logger.debug("the predictor %s is not ready: %s", config.predictor_host, e)
        return False
