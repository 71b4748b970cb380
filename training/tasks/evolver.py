"""tasks: evolver."""
