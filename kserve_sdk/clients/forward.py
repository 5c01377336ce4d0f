"""A transformer's default predict/explain: forward to the predictor/explainer over pooled clients.

The clients come from the process's pool (:mod:`.pool`). While tracing is on, each forwarded call is a
client span whose ``traceparent`` the predictor receives, so the client, the transformer and the
predictor share one trace.
"""
from typing import Any, Dict, Optional

from ..predictor_config import PredictorConfig
from ..tracing import forwarding
from .mismatch import ProtocolMismatch
from .pool import grpc_client, rest_client


async def forward_predict(model: Any, config: PredictorConfig, payload: Any, headers: Dict[str, str],
                          response_headers: Optional[Dict[str, str]]) -> Any:
    """Send ``payload`` to the predictor in ``config`` and return its answer. A predictor that speaks another
    protocol than ``--predictor_protocol`` is told as such (502), naming both and what came back."""
    with forwarding(headers, model.name, config.predictor_host, config.predictor_protocol):
        try:
            if config.predictor_protocol == "grpc-v2":
                client = grpc_client(config.predictor_host, config.predictor_use_ssl,
                                     config.predictor_request_timeout_seconds, config.predictor_request_retries)
                return await client.infer(payload, headers=headers, model_name=model.name)
            client = rest_client(config.predictor_protocol, config.predictor_request_timeout_seconds,
                                 config.predictor_request_retries)
            return await client.infer(config.predictor_base_url, payload, model_name=model.name, headers=headers,
                                      response_headers=response_headers)
        except ProtocolMismatch as e:
            raise e.for_transformer(config.predictor_protocol) from None


async def forward_explain(model: Any, payload: Any, headers: Dict[str, str]) -> Any:
    """Send ``payload`` to the model's ``explainer_host`` (v1 ``:explain``)."""
    client = rest_client("v1", 600, 0)
    with forwarding(headers, model.name, model.explainer_host, "v1"):
        return await client.explain(f"http://{model.explainer_host}", model.name, payload, headers=headers)
