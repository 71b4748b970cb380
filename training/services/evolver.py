"""services: evolver."""
