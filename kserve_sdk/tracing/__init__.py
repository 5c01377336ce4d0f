"""OpenTelemetry tracing of inference calls, configured only by the standard ``OTEL_*`` environment.

Off unless the environment asks for it (config.py): then nothing of OpenTelemetry is imported and a call
pays one attribute check. On, each server process (every ``--workers`` worker, after its fork) sets up
its provider in :func:`setup` and flushes it in :func:`shutdown`; :data:`spans` is then the module that
makes a call's spans (spans.py). Triton's trace settings (settings.py) are kept whether tracing is on or
off, and decide, while it is on, which calls reach the sampler.
"""
import importlib
from contextlib import nullcontext
from typing import Any, ContextManager, Dict, Optional, Set

from ..logging import logger
from .config import read_config
from .settings import TraceSettings

#: kserve_sdk.tracing.spans while tracing is on in this process; None when it is off.
spans: Optional[Any] = None
#: Triton's trace settings of this process (``/v2/trace/setting``).
settings = TraceSettings()
#: The endpoints whose calls are never traced (health, readiness, metrics, ...): what the REST APIs and the
#: gRPC service declare, added when their server is made (handlers/http.py's make_app, handlers/grpc.py).
untraced: Set[str] = set()
_provider: Optional[Any] = None

EXTRA_MISSING = ("Tracing is off: the OTEL_* environment asks for it but OpenTelemetry is not installed: "
                 "pip install 'kserve-sdk[tracing]'")


def setup() -> bool:
    """Start tracing in this process when the environment asks for it; whether it is on."""
    global spans, _provider
    config = read_config()
    if config is None or spans is not None:
        return spans is not None
    try:
        from .provider import build_provider
    except ImportError as e:
        logger.warning("%s (%s)", EXTRA_MISSING, e)
        return False
    try:
        importlib.import_module("opentelemetry.propagate")  # reads OTEL_PROPAGATORS: a bad name raises here

        settings.reset(True)
        _provider = build_provider(config, settings)
        call_spans = importlib.import_module(".spans", __name__)  # (a from-import would find spans=None)
    except Exception as e:  # a propagator or exporter that cannot be made from the OTEL_* settings
        settings.reset(False)
        logger.warning("Tracing is off: %s", e)
        return False
    spans = call_spans
    logger.info("Tracing with OpenTelemetry: exporters %s, protocol %s, sampler %s", ",".join(config.exporters),
                config.protocol, config.sampler)
    return True


def answer_traceparent(call: Any) -> Optional[str]:
    """The ``traceparent`` an answer to ``call`` echoes: its server span's; None for an untraced call."""
    return call.headers.get("traceparent") if call.span is not None else None


def forwarding(headers: Dict[str, str], model_name: str, target: str, protocol: str) -> ContextManager[None]:
    """Around forwarding a call to ``target`` (a predictor): its client span, whose ``traceparent`` goes into
    ``headers``, while tracing is on; nothing while it is off."""
    return nullcontext() if spans is None else spans.forwarding(headers, model_name, target, protocol)


def shutdown() -> None:
    """Export the spans still buffered and stop tracing (on the server's stop)."""
    global spans, _provider
    provider, _provider, spans = _provider, None, None
    if provider is not None:
        provider.shutdown()
