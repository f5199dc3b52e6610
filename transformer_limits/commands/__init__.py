"""CLI subcommands, one module each; every module defines ``register(subparsers)``."""
