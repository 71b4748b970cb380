"""Training writes, one module per concern: `adapters`, `cycle`, `evolver`."""
