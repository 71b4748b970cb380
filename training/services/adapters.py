"""services: adapters."""
