"""Figures of evaluations and runs: best@k curves of several policies, and training curves
of several seeds as a mean with a band (min..max over seeds), smoothed.

Only reads numbers that are given; matplotlib (Agg) is imported when a figure is drawn.
"""

from __future__ import annotations

import pathlib
import textwrap
import warnings
from typing import Optional, Sequence

import numpy as np


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_best_at_k(curves: dict, out_png, *, title: str = "", metric: str = "",
                   is_lower_better: bool = False, bands: Optional[dict] = None,
                   baselines: Optional[dict] = None) -> pathlib.Path:
    """curves: {label: {k: value}}; bands: {label: ({k: low}, {k: high})} drawn shaded;
    baselines: {label: value} drawn as horizontal lines (e.g. the sample submission)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (label, c) in enumerate(curves.items()):
        ks = sorted(int(k) for k in c)
        if not ks:
            continue
        ax.plot(ks, [c[k] if k in c else c[str(k)] for k in ks], "o-", ms=3, color=f"C{i}",
                label=label)
        if bands and label in bands:
            lo, hi = bands[label]
            kb = [k for k in ks if k in lo and k in hi]
            ax.fill_between(kb, [lo[k] for k in kb], [hi[k] for k in kb], color=f"C{i}",
                            alpha=0.18, lw=0)
    for j, (label, v) in enumerate((baselines or {}).items()):
        if v is not None:
            ax.axhline(v, ls="--", lw=1, color=f"C{len(curves) + j}", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (programs drawn)")
    direction = "lower" if is_lower_better else "higher"
    ax.set_ylabel(f"expected best of k\n({metric}, {direction} is better)" if metric
                  else "expected best of k")
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_png = pathlib.Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def smooth(y: Sequence[float], window: int) -> np.ndarray:
    """Trailing mean over `window` points (shorter at the start); NaNs are skipped."""
    y = np.asarray(y, np.float64)
    out = np.full(len(y), np.nan)
    for i in range(len(y)):
        w = y[max(0, i - window + 1):i + 1]
        w = w[np.isfinite(w)]
        if len(w):
            out[i] = w.mean()
    return out


def seed_band(series: Sequence[Sequence[float]], window: int = 5):
    """Runs of unequal length -> (steps, mean, low, high) of the smoothed runs, over the
    steps every run reached. A step where no run has a value (no valid program yet, say) is
    NaN, a gap in the plot."""
    n = min(len(s) for s in series)
    sm = np.stack([smooth(s, window)[:n] for s in series])
    with warnings.catch_warnings():     # all-NaN columns are expected: they stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return (np.arange(1, n + 1), np.nanmean(sm, 0), np.nanmin(sm, 0), np.nanmax(sm, 0))


def plot_training_bands(panels: dict, out_png, *, title: str = "",
                        window: int = 5) -> pathlib.Path:
    """panels: {y label: {run label: [series per seed]}}, one subplot per panel, each run
    label a mean line with a min..max band over its seeds."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.4), squeeze=False)
    for ax, (ylabel, runs) in zip(axes[0], panels.items()):
        for i, (label, series) in enumerate(runs.items()):
            series = [s for s in series if len(s)]
            if not series:
                continue
            x, mean, lo, hi = seed_band(series, window)
            ax.plot(x, mean, color=f"C{i}", label=f"{label} ({len(series)} seeds)")
            ax.fill_between(x, lo, hi, color=f"C{i}", alpha=0.2, lw=0)
        ax.set_xlabel("update")
        ax.set_ylabel(textwrap.fill(ylabel, 30))   # a long label would run into the title
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out_png = pathlib.Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png
