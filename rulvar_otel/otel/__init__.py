"""OpenTelemetry mapping: spans (and metrics) from a run's event stream."""
