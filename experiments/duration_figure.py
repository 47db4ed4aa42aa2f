"""The RL-for-MLE paper's Figure 2 on our trainer: what the policy chooses over training,
with and without duration weights (or any other variants of launch/ablations.sh).

    python experiments/duration_figure.py --out_dir=runs/ablations/tabular-synth \
        --out=experiments/results/ablations_files/duration_weights.png

Reads OUT/<variant>/seed<k>/run/metrics.jsonl (launch/ablations.sh) for each variant and
plots, per update (smoothed, band = min..max over seeds): the share of the batch's programs
from the fast families (linear, naive Bayes / Bayesian ridge, k-NN), the mean action time,
the mean score of the valid programs, and the share of the families named by --best (the
task's best ones: gradient boosting on tabular-synth and duration-synth). Prints the same as
a table of thirds of training and, where the runs logged it, the credit each family got:
its mean advantage, duration weight and their product (what the gradient scales it by).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import report as base  # noqa: E402
from mle_rl.io import curves  # noqa: E402

FAST = ("linear", "naive_bayes", "knn")


def share(row: dict, families) -> float:
    """The share of a batch's programs (one metrics row) from these families."""
    return sum(row.get(f"family/{f}", 0.0) for f in families)


def series(out_dir: pathlib.Path, variant: str, best=("gradient_boosting",)) -> dict:
    """{quantity: [per-seed series]} for one variant."""
    out = {"fast": [], "time": [], "score": [], "best": []}
    for sd in sorted((out_dir / variant).glob("seed*")):
        rows = base._metrics(sd / "run")
        if not rows:
            continue
        out["fast"].append([share(r, FAST) for r in rows])
        out["time"].append([r.get("duration_mean_s", math.nan) for r in rows])
        out["score"].append([r.get("score_mean_valid", math.nan) for r in rows])
        out["best"].append([share(r, best) for r in rows])
    return out


def credit(out_dir: pathlib.Path, variant: str) -> dict:
    """{family: (programs, mean advantage, mean duration weight, mean weight x advantage)}
    over every update of every seed, each program counted once (metrics.jsonl's
    advantage/, weight/ and credit/<family>, logged since session 43; {} before)."""
    acc = {}
    for sd in sorted((out_dir / variant).glob("seed*")):
        for r in base._metrics(sd / "run"):
            for k in r:
                if not k.startswith("credit/"):
                    continue
                f = k[7:]
                n = r.get(f"family/{f}", 0.0)     # a share of the batch: programs / batch
                a = acc.setdefault(f, [0.0, 0.0, 0.0, 0.0])
                a[0] += n
                a[1] += n * r[f"advantage/{f}"]
                a[2] += n * r[f"weight/{f}"]
                a[3] += n * r[k]
    return {f: (n, a / n, w / n, c / n) for f, (n, a, w, c) in acc.items() if n > 0}


def thirds(xs: list) -> list:
    """Mean over seeds of each third of training."""
    n = min(len(x) for x in xs)
    k = max(1, math.ceil(n / 3))
    out = []
    for i in range(0, n, k):
        vals = [v for x in xs for v in x[i:i + k] if v == v]
        out.append(sum(vals) / len(vals) if vals else math.nan)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out_dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default="full,no_duration_weights")
    p.add_argument("--best", default="gradient_boosting",
                   help="comma-separated families whose share is shown as the last panel")
    a = p.parse_args(argv)
    out_dir = pathlib.Path(a.out_dir)
    best = tuple(a.best.split(","))
    data = {v: series(out_dir, v, best) for v in a.variants.split(",")}
    data = {v: d for v, d in data.items() if d["fast"]}
    if not data:
        print(f"error: no runs under {out_dir}/<variant>/seed*/run", file=sys.stderr)
        return 2
    panels = {"share of linear, NB, k-NN programs": {v: d["fast"] for v, d in data.items()},
              "mean action time (s)": {v: d["time"] for v, d in data.items()},
              "mean score of valid programs": {v: d["score"] for v, d in data.items()},
              f"share of {', '.join(best)} programs": {v: d["best"] for v, d in data.items()}}
    png = curves.plot_training_bands(panels, a.out, title=f"{out_dir.name}: {', '.join(data)}")
    print("| variant | seeds | fast-family share (thirds) | action s (thirds) | valid score "
          f"(thirds) | {', '.join(best)} share (thirds) |\n|---|---|---|---|---|---|")
    for v, d in data.items():
        cells = [" → ".join(f"{x:.2f}" for x in thirds(d[q]))
                 for q in ("fast", "time", "score", "best")]
        print(f"| {v} | {len(d['fast'])} | " + " | ".join(cells) + " |")
    for v in data:
        cr = credit(out_dir, v)
        if not cr:
            continue
        total = sum(c[0] for c in cr.values())
        print(f"\ncredit per family, {v} (all updates and seeds; each program once):\n\n"
              "| family | share of programs | mean advantage | mean weight | mean weight x "
              "advantage |\n|---|---|---|---|---|")
        for f, (n, a, w, c) in sorted(cr.items(), key=lambda kv: -kv[1][0]):
            print(f"| {f} | {n / total:.2f} | {a:+.3f} | {w:.2f} | {c:+.3f} |")
    print(f"figure: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
