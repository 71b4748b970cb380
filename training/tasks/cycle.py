"""tasks: cycle."""
