"""Registered experiments, one module per topic; each calls ``register_experiment`` on import."""
