"""``verify.figures.figure_png``: PNG bytes that depend only on what is drawn."""

from __future__ import annotations

import pytest

from transformer_limits.verify.figures import figure_png


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2), dpi=50)
    FigureCanvasAgg(fig)
    fig.add_subplot(1, 1, 1).plot([1, 2, 3], [1, 4, 9])
    return fig


def test_png_is_deterministic_and_carries_no_software_chunk():
    a, b = figure_png(_figure()), figure_png(_figure())
    assert a[:8] == b"\x89PNG\r\n\x1a\n" and a == b
    assert b"Software" not in a and b"matplotlib" not in a


def test_savefig_options_pass_through_but_format_and_metadata_are_fixed():
    assert figure_png(_figure(), dpi=100) != figure_png(_figure())
    for key in ("format", "metadata"):
        with pytest.raises(ValueError, match=key):
            figure_png(_figure(), **{key: None})
