"""CLI subcommands, one module each; every module defines ``register(subparsers)``.

:func:`register_commands` imports each (plain imports, so the import graph is visible to tools and
the layer test) and adds its parser, in the order ``--help`` lists them.  A new subcommand is a new
module here plus one name in :func:`_modules`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["register_commands"]

def _modules() -> tuple[ModuleType, ...]:
    # imported on first use: building the parser must not import a command's dependencies twice,
    # and ``import transformer_limits.commands`` alone stays cheap
    from transformer_limits.commands import derive, info, rate, report, spectral, verify

    return derive, info, rate, report, spectral, verify


def register_commands(subparsers: Any) -> None:
    """Add every subcommand's parser to ``subparsers`` (an argparse ``add_subparsers`` object)."""
    for module in _modules():
        module.register(subparsers)
