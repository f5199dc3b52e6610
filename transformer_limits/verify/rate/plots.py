"""Log-log plots for rate experiments (matplotlib, Agg canvas, no pyplot global state).

One panel holds one or more :class:`RateSeries`: for each, the per-level aggregate error with error
bars spanning the per-seed spread (min to max over seeds), the fitted line ``C p^q`` over the
fitting window with the fitted exponent and its confidence interval in the legend, and a dashed
line of the claimed slope anchored at the finest level (largest p by default — depth L, width m,
tokens N; smallest p for step sizes h).  The result is a
:class:`transformer_limits.verify.experiment.Figure` (PNG bytes + caption) for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from transformer_limits.verify.experiment import Figure
from transformer_limits.verify.figures import figure_png
from transformer_limits.verify.stats.power_law import PowerLawFit

__all__ = ["RateSeries", "grid_heatmap", "rate_figure"]

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


@dataclass
class RateSeries:
    """Errors ``(n_levels, n_seeds)`` at refinement levels ``params`` ``(n_levels,)``.

    ``fit``: a :func:`~transformer_limits.verify.stats.power_law.fit_power_law` result on the same data
    (drawn over its window, CI in the legend); ``claimed_exponent``: slope of the claimed line;
    ``finest``: ``"max"`` (largest p is the finest level) or ``"min"`` (e.g. step sizes);
    ``replicates``: what the columns of ``errors`` are, for the legend ("seeds", "cases").
    """

    label: str
    params: np.ndarray
    errors: np.ndarray
    fit: PowerLawFit | None = None
    claimed_exponent: float | None = None
    finest: str = "max"
    replicates: str = "seeds"

    def __post_init__(self) -> None:
        self.params = np.asarray(self.params, dtype=np.float64)
        errors = np.asarray(self.errors, dtype=np.float64)
        self.errors = errors[:, None] if errors.ndim == 1 else errors
        if self.params.ndim != 1 or self.errors.shape[0] != self.params.size:
            raise ValueError(f"errors must have shape (n_levels, n_seeds) with n_levels = {self.params.size}, "
                             f"got {self.errors.shape}")
        if self.finest not in ("max", "min"):
            raise ValueError(f"finest must be 'max' or 'min', got {self.finest!r}")


def _draw(ax, series: RateSeries, colour: str) -> None:
    order = np.argsort(series.params)
    p, e = series.params[order], series.errors[order]
    # a fit holds its levels sorted by p, like ``p`` here, and its own aggregate (mean by default)
    centre = np.asarray(series.fit.level_errors) if series.fit is not None else e.mean(axis=1)
    spread = np.vstack([centre - e.min(axis=1), e.max(axis=1) - centre]).clip(min=0)
    ax.errorbar(p, centre, yerr=spread, fmt="o", ms=4, capsize=3, color=colour,
                label=f"{series.label} (mean and range over {e.shape[1]} {series.replicates})")
    if series.fit is not None:
        fit = series.fit
        used = np.asarray(fit.window.used)
        grid = np.geomspace(fit.params[used].min(), fit.params[used].max(), 50)
        low, high = fit.interval("exponent")
        ax.plot(grid, fit.predict(grid), "-", color=colour, lw=1.2,
                label=f"fit q = {fit.exponent.value:.3f}, {fit.confidence:.0%} CI [{low:.3f}, {high:.3f}]")
    if series.claimed_exponent is not None:
        i = int(np.argmax(p) if series.finest == "max" else np.argmin(p))
        anchor_p, anchor_e = p[i], centre[i]
        q = float(series.claimed_exponent)
        ax.plot(p, anchor_e * (p / anchor_p) ** q, "--", color=colour, lw=1.0, alpha=0.7,
                label=f"claimed slope {q:g} (anchored at the finest level)")


def rate_figure(name: str, caption: str, series: Sequence[RateSeries], *, xlabel: str,
                ylabel: str = "error", title: str | None = None) -> Figure:
    """A log-log :class:`Figure` of ``series`` (see the module docstring)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    if not series:
        raise ValueError("series must hold at least one RateSeries")
    fig = MplFigure(figsize=(6.4, 4.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for k, s in enumerate(series):
        _draw(ax, s, _COLOURS[k % len(_COLOURS)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return Figure(name=name, png=figure_png(fig), caption=caption)


def grid_heatmap(name: str, caption: str, values: np.ndarray, rows: Sequence[float], cols: Sequence[float], *,
                 row_label: str, col_label: str, value_label: str, log_colour: bool = True) -> Figure:
    """A heatmap :class:`Figure` of ``values`` (n_rows, n_cols) over a two-parameter grid, every cell
    annotated with its value (e.g. error / claimed rate over (L, H): where the bound is approached)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure as MplFigure

    values = np.asarray(values, dtype=float)
    if values.shape != (len(rows), len(cols)):
        raise ValueError(f"values must have shape ({len(rows)}, {len(cols)}), got {values.shape}")
    fig = MplFigure(figsize=(1.0 + 0.75 * len(cols), 1.2 + 0.55 * len(rows)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    positive = values[np.isfinite(values) & (values > 0)]
    norm = (LogNorm(positive.min(), positive.max()) if log_colour and positive.size and positive.min() < positive.max()
            else Normalize())
    image = ax.imshow(values, origin="lower", cmap="viridis", norm=norm, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            ax.text(j, i, f"{values[i, j]:.3g}", ha="center", va="center", fontsize=7,
                    color="white" if norm(values[i, j]) < 0.5 else "black")
    ax.set_xticks(range(len(cols)), [f"{c:g}" for c in cols])
    ax.set_yticks(range(len(rows)), [f"{r:g}" for r in rows])
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    fig.colorbar(image, ax=ax, label=value_label)
    fig.tight_layout()
    return Figure(name=name, png=figure_png(fig), caption=caption)
