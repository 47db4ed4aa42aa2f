"""Two `launch/rl_gain.sh` output folders side by side, seed by seed: what a learner change moved.

    python experiments/compare_runs.py runs/rl_gain_b5_fix runs/rl_gain_b5_valid1 \
        --names=fixed,old

For every <task>/seed<k> that both folders trained (rl/metrics.jsonl), prints markdown:
the training log's first → last fifth (valid fraction, entropy, KL loss to the SFT policy),
the share of updates with a max@k tie push (`tie_push.py`), `bad_format` programs, updates
and programs per hour; then best@k at each power of two from the RL evaluations
(rl_eval.json) beside the SFT policy's (the first folder's sft.json, else the second's), with
`rl_gain_report`'s floor per task (an invalid program counts as the sample submission).
When the two runs logged different numbers of updates (a slower machine at the same wall-clock
budget), the fifths are also given over the first updates they share.
Only numbers on disk are shown; a missing evaluation is a dash. Same seed, same SFT samples:
the two columns differ by the change and the sampling noise of one run each, so read one pair
as one draw, not as the spread over seeds.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Optional

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import report as base  # noqa: E402
import tie_push  # noqa: E402
from mle_rl.agent import best_at_k as bak  # noqa: E402

FIFTHS = (("valid_frac", "valid fraction per update"), ("entropy", "entropy"),
          ("kl_loss", "KL loss to the SFT policy"))


def pairs(a: pathlib.Path, b: pathlib.Path) -> list:
    """(task, seed) trained in both folders, sorted."""
    def trained(d):
        return {(m.parents[2].name, m.parents[1].name) for m in d.glob("*/seed*/rl/metrics.jsonl")}
    return sorted(trained(a) & trained(b))


def _fifths(rows: list, key: str) -> Optional[tuple]:
    v = [r[key] for r in rows if key in r]
    if not v:
        return None
    f = max(1, len(v) // 5)
    return float(np.mean(v[:f])), float(np.mean(v[-f:]))


def _tie_share(rows: list) -> Optional[float]:
    if not any(k.startswith("advantage/") for r in rows for k in r):
        return None
    return float(np.mean([abs(tie_push.mean_advantage(r)) > tie_push.THRESHOLD for r in rows]))


def trend_cells(rows: list) -> dict:
    """The fifths (FIFTHS) and the tie share of a run's logged updates, as table cells."""
    out = {}
    for key, _ in FIFTHS:
        f = _fifths(rows, key)
        out[key] = "—" if f is None else f"{f[0]:.3f} → {f[1]:.3f}"
    tie = _tie_share(rows)
    out["tie"] = "not logged" if tie is None else f"{tie:.0%}"
    return out


def training_rows(run: pathlib.Path) -> dict:
    """One seed's training facts, as table cells, and its logged updates ("rows")."""
    rows = base._metrics(run / "rl")
    s = base._json(run / "rl" / "summary.json") or {}
    out = {"rows": rows, **trend_cells(rows)}
    st = s.get("statuses") or {}
    out["bad_format"] = (f"{st.get('bad_format', 0)} of {s['actions_done']:,}"
                         if "actions_done" in s else "—")
    out["throughput"] = (f"{s['updates']}, {s['programs_per_hour']:,.0f}"
                         if "updates" in s and "programs_per_hour" in s else "—")
    return out


def _trend_lines(ta: dict, tb: dict) -> list:
    return ([f"| {label} | {ta[key]} | {tb[key]} |" for key, label in FIFTHS]
            + [f"| updates with a tie push (`tie_push.py`) | {ta['tie']} | {tb['tie']} |"])


def _solve(ev: Optional[dict]) -> list:
    if not ev:
        return []
    return [x for x, m in zip(ev.get("scores", []), ev.get("modes", [])) if m == "solve"]


def best_at_k_rows(task: str, evs: list) -> tuple:
    """(ks, [curve or None per eval], [valid solve samples or None], metric, lower-better)."""
    present = [e for e in evs if e]
    if not present:
        return [], [None] * len(evs), [None] * len(evs), "?", False
    lower = bool(present[0]["is_lower_better"])
    every = [x for e in present for x in _solve(e)]
    floor = bak.floor_of(every, present[0].get("sample_submission_score"), lower)
    n = min(len(_solve(e)) for e in present)
    ks = bak.powers_of_two(n)
    curves = [bak.best_at_k(_solve(e), ks, is_lower_better=lower, floor=floor)
              if e and floor is not None else None for e in evs]
    valid = [None if not e else sum(x is not None and np.isfinite(x) for x in _solve(e))
             for e in evs]
    return ks, curves, valid, present[0]["metric"], lower


def same_stretch(ta: dict, tb: dict, names: tuple) -> list:
    """When the two runs logged different numbers of updates (a slower machine, another
    budget), their fifths cover different stretches of training: the same rows over the
    first min(n_a, n_b) updates of each, so that the learners are compared update for update.
    Their best@k below still comes from runs of different lengths."""
    n_a, n_b = len(ta["rows"]), len(tb["rows"])
    u = min(n_a, n_b)
    if n_a == n_b or u == 0:
        return []
    na, nb = names
    return ([f"The runs logged {n_a} and {n_b} updates; over the first {u} of each:", "",
             f"| first → last fifth of the first {u} updates | {na} | {nb} |", "|---|---|---|"]
            + _trend_lines(trend_cells(ta["rows"][:u]), trend_cells(tb["rows"][:u])) + [""])


def compare(a: pathlib.Path, b: pathlib.Path, names: tuple) -> str:
    found = pairs(a, b)
    if not found:
        return f"No <task>/seed<k> trained in both {a} and {b}."
    na, nb = names
    out = [f"# {na} ({a}) against {nb} ({b}), seed by seed", ""]
    for task, seed in found:
        ra, rb = a / task / seed, b / task / seed
        ta, tb = training_rows(ra), training_rows(rb)
        out += [f"## {task}, {seed}", "",
                f"| first → last fifth of the updates | {na} | {nb} |", "|---|---|---|"]
        out += _trend_lines(ta, tb)
        out += [f"| `bad_format` programs over the run | {ta['bad_format']} | {tb['bad_format']} |",
                f"| updates, programs per hour | {ta['throughput']} | {tb['throughput']} |", ""]
        out += same_stretch(ta, tb, names)
        sft = base._eval(ra / "sft", task) or base._eval(rb / "sft", task)
        evs = [sft, base._eval(ra / "rl_eval", task), base._eval(rb / "rl_eval", task)]
        ks, cs, valid, metric, lower = best_at_k_rows(task, evs)
        if not ks:
            out += ["No best@k: no evaluation on disk.", ""]
            continue
        arrow = "↓" if lower else "↑"
        temps = {(e.get("sampling") or {}).get("temperature") for e in evs if e}
        temp = (f"temperature {temps.pop()}" if len(temps) == 1 and None not in temps
                else "**temperatures differ or are unrecorded: " + ", ".join(
                    str((e.get("sampling") or {}).get("temperature", "?")) if e else "—"
                    for e in evs) + "**")
        out += [f"best@k ({metric} {arrow}) from the solve samples, {temp}:", "",
                f"| k | SFT | RL, {na} | RL, {nb} |", "|---|---|---|---|"]
        for k in ks:
            cells = ["—" if c is None else f"{c[k]:.4f}" for c in cs]
            out.append(f"| {k} | " + " | ".join(cells) + " |")
        n = [len(_solve(e)) if e else None for e in evs]
        out += ["| valid solve samples | " + " | ".join(
            "—" if v is None else f"{v} of {m}" for v, m in zip(valid, n)) + " |", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=pathlib.Path)
    p.add_argument("b", type=pathlib.Path)
    p.add_argument("--names", default="A,B", help="two column names, comma-separated")
    args = p.parse_args(argv)
    names = tuple(args.names.split(","))
    if len(names) != 2:
        p.error("--names takes two names, comma-separated")
    for d in (args.a, args.b):
        if not d.is_dir():
            p.error(f"no such folder: {d}")
    print(compare(args.a, args.b, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
