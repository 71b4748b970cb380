"""services: cycle."""
