"""A matplotlib figure as PNG bytes, the same bytes on every run.

Every figure of the reports and of ``transformer-limits spectral`` goes through
:func:`figure_png`.  matplotlib writes a ``Software`` text chunk (its version) into a PNG;
:func:`figure_png` leaves it out, so a PNG depends only on what is drawn (and the renderer): two runs
of the same experiment give byte-identical figures.
"""

from __future__ import annotations

import io
from typing import Any

__all__ = ["figure_png"]


def figure_png(fig: Any, **savefig_kwargs: Any) -> bytes:
    """``fig.savefig`` to PNG in memory, without the ``Software`` metadata; ``savefig_kwargs`` (e.g.
    ``dpi``, ``bbox_inches``) are passed on (``format`` and ``metadata`` are fixed here)."""
    for key in ("format", "metadata"):
        if key in savefig_kwargs:
            raise ValueError(f"savefig_kwargs must not set {key!r}: figure_png fixes it")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None}, **savefig_kwargs)
    return buf.getvalue()
