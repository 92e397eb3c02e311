"""Whether this process traces at all, decided without importing OpenTelemetry."""

from __future__ import annotations

from collections.abc import Mapping


def tracing_requested(env: Mapping[str, str]) -> bool:
    """Do the standard ``OTEL_*`` variables ask for traces?"""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
