"""The OpenTelemetry SDK set up for one server process: exporters, batch processor, resource, sampler.

Imported only when the environment asks for tracing (see config.py). Each worker builds its own provider
after the fork, so each has its own exporting thread.
"""
import os
from typing import Any, Optional, Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import SpanKind

from .config import TracingConfig
from .settings import TraceSettings

MODEL_ATTRIBUTE = "kserve.model_name"


def _env_sampler(config: TracingConfig) -> Sampler:
    """The sampler ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` name."""
    name = config.sampler
    root = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF}.get(name.replace("parentbased_", ""))
    if root is None:
        root = TraceIdRatioBased(config.sampler_ratio)
    return ParentBased(root) if name.startswith("parentbased_") else root


class SettingsSampler(Sampler):
    """For a call's server span, Triton's trace settings first (level, count, one call in ``trace_rate``),
    then the environment's sampler for the calls they let through; other spans (stages, forwarding, a
    model's own) go straight to the environment's sampler, which follows their parent's decision."""

    def __init__(self, settings: TraceSettings, then: Sampler):
        self.settings, self.then = settings, then

    def should_sample(self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Optional[Sequence[Any]] = None, trace_state: Any = None
                      ) -> SamplingResult:
        if kind is SpanKind.SERVER:
            model_name = attributes.get(MODEL_ATTRIBUTE) if attributes else None
            if not self.settings.admits(model_name):
                return SamplingResult(Decision.DROP)
        return self.then.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"TritonTraceSettings{{{self.then.get_description()}}}"


def _exporter(name: str, protocol: str) -> Any:
    if name == "console":
        return ConsoleSpanExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()  # endpoint, headers, TLS and timeout from the OTEL_EXPORTER_OTLP_* variables


def build_provider(config: TracingConfig, settings: TraceSettings) -> TracerProvider:
    """A provider exporting through ``config``'s exporters with the batch processor, made the global one
    (so a model's own spans join the server's), its resource naming the service and this process."""
    attributes = {"process.pid": os.getpid()}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name" not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = "kserve-sdk"
    provider = TracerProvider(sampler=SettingsSampler(settings, _env_sampler(config)),
                              resource=Resource.create(attributes))
    for name in config.exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, config.protocol)))
    trace.set_tracer_provider(provider)
    return provider
