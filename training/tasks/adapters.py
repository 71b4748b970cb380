"""tasks: adapters."""
