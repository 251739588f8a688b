"""rulvar-otel benchmarks: ``python -m benchmarks`` (see docs/benchmarks.md)."""
