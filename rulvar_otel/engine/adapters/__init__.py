"""Model adapters for real providers (imported on demand: they load network clients lazily)."""
