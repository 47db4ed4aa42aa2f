"""The RL-for-MLE paper's instrumentation ablation on our trainer, from a weak start: how
soon, and how often, RL finds programs that work, with and without partial credit.

    python experiments/instrument_figure.py --out_dir=runs/ablations/instr-pima \
        --out=experiments/results/ablations_files/instrumentation.png

Reads OUT/<variant>/seed<k>/run/metrics.jsonl (launch/ablations.sh) for each variant and
plots, per update (smoothed, band = min..max over seeds): the valid fraction of the batch,
the mean score of its valid programs, the mean reward, and the mean number of instrumented
prints the batch's programs reached (0 throughout without instrumentation: nothing is
inserted). Prints a table of thirds of training, per variant the runs that never executed
a valid program (with the update of each run's first valid one), and the valid programs of
the trained policies' evaluations (OUT/<variant>/seed<k>/eval.json) and of the starting
policy's (--start_evals), by sample mode.
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
from duration_figure import thirds  # noqa: E402
from mle_rl.io import curves  # noqa: E402

QUANTITIES = {"valid": ("valid fraction", "valid_frac"),
              "score": ("mean score of valid programs", "score_mean_valid"),
              "reward": ("mean reward", "reward_mean"),
              "hits": ("instrumented prints reached", "hits_mean")}


def series(out_dir: pathlib.Path, variant: str) -> dict:
    """{quantity: [per-seed series], "first": [first update with a valid program or None]}
    for one variant."""
    out = {q: [] for q in QUANTITIES} | {"first": []}
    for sd in sorted((out_dir / variant).glob("seed*")):
        rows = base._metrics(sd / "run")
        if not rows:
            continue
        for q, (_, key) in QUANTITIES.items():
            out[q].append([math.nan if r.get(key) is None else r[key] for r in rows])
        out["first"].append(base.first_valid_update(rows))
    return out


def eval_valid(paths) -> dict:
    """{mode: (valid, n)} over `experiments/evaluate.py` JSONs, by sample mode (solve, or
    improve the best so far: with a weak policy the improve samples copy the one valid
    program found, so only the solve samples measure the policy)."""
    out = {}
    for p in paths:
        for res in (base._json(p) or {}).values():
            for score, mode in zip(res.get("scores", []), res.get("modes", [])):
                v, n = out.get(mode, (0, 0))
                out[mode] = (v + (score is not None), n + 1)
    return out


def _valid_cell(counts: dict, mode: str) -> str:
    v, n = counts.get(mode, (0, 0))
    return f"{v}/{n}" if n else "—"


def _cell(xs: list) -> str:
    return " → ".join("—" if x != x else f"{x:.2f}" for x in thirds(xs))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out_dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default="full,no_instrumentation")
    p.add_argument("--start_evals", nargs="*", default=[],
                   help="evaluate.py JSONs of the starting policy (a row of its own)")
    a = p.parse_args(argv)
    out_dir = pathlib.Path(a.out_dir)
    data = {v: series(out_dir, v) for v in a.variants.split(",")}
    data = {v: d for v, d in data.items() if d["valid"]}
    if not data:
        print(f"error: no runs under {out_dir}/<variant>/seed*/run", file=sys.stderr)
        return 2
    panels = {label: {v: d[q] for v, d in data.items()} for q, (label, _) in QUANTITIES.items()}
    png = curves.plot_training_bands(panels, a.out, title=f"{out_dir.name}: with and without "
                                     "instrumentation")
    print("| variant | seeds | valid fraction (thirds) | valid score (thirds) | reward (thirds) "
          "| prints reached (thirds) | runs never valid | first valid update per seed |\n"
          "|---|---|---|---|---|---|---|---|")
    for v, d in data.items():
        never = sum(f is None for f in d["first"])
        firsts = ", ".join("never" if f is None else str(f) for f in d["first"])
        print(f"| {v} | {len(d['valid'])} | " +
              " | ".join(_cell(d[q]) for q in QUANTITIES) +
              f" | {never}/{len(d['first'])} | {firsts} |")
    print("\nvalid programs at evaluation (evaluate.py, all seeds):\n\n"
          "| policy | solve samples | improve samples |\n|---|---|---|")
    rows = ([("start", eval_valid(a.start_evals))] if a.start_evals else []) + [
        (v, eval_valid(sorted((out_dir / v).glob("seed*/eval.json")))) for v in data]
    for name, counts in rows:
        print(f"| {name} | {_valid_cell(counts, 'solve')} | {_valid_cell(counts, 'improve')} |")
    print(f"figure: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
