"""What the standard ``OTEL_*`` environment asks of tracing, read without importing OpenTelemetry.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console``, or when it is unset and an
OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is; it is off when
``OTEL_SDK_DISABLED`` is true or the exporter is ``none``. A value no reading can make sense of turns
tracing off with one warning naming it.
"""
import os
from typing import List, Mapping, NamedTuple, Optional

from ..logging import logger

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")


class TracingConfig(NamedTuple):
    """Tracing as the environment configures it."""

    exporters: List[str]  # "otlp", "console"
    protocol: str  # of the OTLP exporter: "grpc" or "http/protobuf"
    sampler: str
    sampler_ratio: float  # for the *traceidratio samplers


class BadSetting(ValueError):
    """An ``OTEL_*`` value that cannot be used; its message names the variable."""


def _choice(env: Mapping[str, str], name: str, allowed: tuple, default: str) -> str:
    value = env.get(name, "").strip().lower() or default
    if value not in allowed:
        raise BadSetting(f"{name}={env[name]!r} is not one of {', '.join(allowed)}")
    return value


def _exporters(env: Mapping[str, str]) -> List[str]:
    raw = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not raw:
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        return ["otlp"] if endpoint else []
    names = [name.strip() for name in raw.split(",") if name.strip()]
    for name in names:
        if name not in EXPORTERS:
            raise BadSetting(f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']!r}: {name!r} is not one of "
                             f"{', '.join(EXPORTERS)}")
    return [] if "none" in names else names


def _ratio(env: Mapping[str, str], sampler: str) -> float:
    if not sampler.endswith("traceidratio"):
        return 1.0
    raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    try:
        ratio = float(raw) if raw else 1.0
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise BadSetting(f"OTEL_TRACES_SAMPLER_ARG={raw!r} is not a ratio between 0 and 1")
    return ratio


def read_config(env: Mapping[str, str] = os.environ) -> Optional[TracingConfig]:
    """The tracing ``env`` asks for; None when it asks for none or a value is bad (warned about once)."""
    try:
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        exporters = _exporters(env)
        if not exporters:
            return None
        protocol = _choice(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", PROTOCOLS, "") if \
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip() else \
            _choice(env, "OTEL_EXPORTER_OTLP_PROTOCOL", PROTOCOLS, "grpc")
        sampler = _choice(env, "OTEL_TRACES_SAMPLER", SAMPLERS, "parentbased_always_on")
        return TracingConfig(exporters, protocol, sampler, _ratio(env, sampler))
    except BadSetting as e:
        logger.warning("Tracing is off: %s", e)
        return None
