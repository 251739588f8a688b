"""Model adapters for real providers (imported on demand: they load network clients lazily)."""

# The adapters live in their own modules (rulvar_otel.engine.adapters.openai_compat); the engine
# facade re-exports them, so this package itself exports nothing.
__all__: list[str] = []
