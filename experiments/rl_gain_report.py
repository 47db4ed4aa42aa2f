"""The report of `launch/rl_gain.sh`: does RL beat the SFT policy at every k, and at equal compute?

    python experiments/rl_gain_report.py --out_dir=runs/rl_gain --out=experiments/results/rl_gain.md

Reads what rl_gain.sh wrote (experiments/rl_gain_data.py: per task directory OUT/<task>/,
each seed's evaluations and RL run, and the extra SFT pool and its top-ups); copies it
beside the report (<report stem>_files/, so a report can be rebuilt from the copy with
--out_dir=<that copy>) and writes the markdown and its figures. Only
numbers on disk are shown; a missing piece is named. best@k is over the i.i.d. solve samples,
with one floor per task (its sample submission's score; an invalid program counts as that).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import report as base  # noqa: E402
from mle_rl.agent import best_at_k as bak  # noqa: E402
from mle_rl.io import curves  # noqa: E402
from rl_gain_data import Task, keep_files, mean_std, solve_scores  # noqa: E402


def _ms(m, sd) -> str:
    return "—" if m is None else f"{m:.4f} ± {sd:.4f}"


def _yes_no(x, unknown: str = "— (one seed)") -> str:
    return unknown if x is None else ("yes" if x else "no")


def best_at_k_table(t: Task) -> tuple[str, dict]:
    """Rows k: SFT and RL mean ± std over seeds; -> (markdown, findings)."""
    ks = t.ks()
    sft = {s: t.curve(solve_scores(e), ks) for s, e in t.sft.items() if e}
    rl = {s: t.curve(solve_scores(e), ks) for s, e in t.rl.items() if e}
    lines = [f"| k | SFT best@k ({len(sft)} seeds) | RL best@k ({len(rl)} seeds) | RL − SFT "
             "| RL ahead by > 1 std |", "|---|---|---|---|---|"]
    found = {"ks": ks, "sft": {}, "rl": {}, "ahead_every_k": bool(ks and sft and rl)}
    for k in ks:
        a = mean_std([c.get(k) for c in sft.values()])
        b = mean_std([c.get(k) for c in rl.values()])
        found["sft"][k], found["rl"][k] = a, b
        if a[0] is None or b[0] is None:
            lines.append(f"| {k} | {_ms(*a)} | {_ms(*b)} | — | — |")
            found["ahead_every_k"] = False
            continue
        diff = b[0] - a[0]
        # a spread needs two seeds on each side: with one, "ahead by > 1 std" is not known
        spread = min(len(sft), len(rl)) > 1
        clear = (t.better(b[0], a[0]) and abs(diff) > max(a[1], b[1])) if spread else None
        if t.better(a[0], b[0]):
            found["ahead_every_k"] = False
        lines.append(f"| {k} | {_ms(*a)} | {_ms(*b)} | {diff:+.4f} | {_yes_no(clear)} |")
        found[f"clear@{k}"] = clear
    return "\n".join(lines), found


def pooled_sft_table(t: Task, found: dict) -> tuple[str, Optional[bool]]:
    """The SFT policy's best@k from all its solve samples (every seed's and the pool's: one
    policy, so they pool), beside RL's mean over seeds (``found`` of ``best_at_k_table``): a
    far tighter estimate of the SFT curve than one seed's N samples, and the only one beyond
    k = N. -> (markdown, whether RL is at or above it at every k <= N; None when nothing pools
    beyond one seed's samples)."""
    ks, m = found["ks"], len(t.sft_all)
    if not ks or m <= max((len(solve_scores(e)) for e in t.sft.values() if e), default=0):
        return "", None
    rows = sorted(set(bak.powers_of_two(m)) | {m})
    sft = t.curve(t.sft_all, rows)
    n_rl = sum(1 for e in t.rl.values() if e)
    lines = [f"| k | SFT best@k, all {m} samples | RL best@k ({n_rl} seeds) | RL − SFT |",
             "|---|---|---|---|"]
    ahead = n_rl > 0
    for k in rows:
        r = found["rl"].get(k, (None, None))
        if r[0] is None or sft.get(k) is None:
            lines.append(f"| {k} | {base._fmt(sft.get(k))} | — | — |")
            continue
        ahead = ahead and not t.better(sft[k], r[0])
        lines.append(f"| {k} | {base._fmt(sft[k])} | {_ms(*r)} | {r[0] - sft[k]:+.4f} |")
    return "\n".join(lines), ahead


def equal_compute_table(t: Task) -> str:
    """Per seed: E, RL best@N, SFT best@(E+N) from every sample of the seed's SFT policy,
    greedy at E+N programs, and the best program RL itself ran while training."""
    lines = ["| seed | E (programs RL ran) | RL best@N | SFT best@(E+N) | greedy search, "
             "E+N programs | best program of the RL run |", "|---|---|---|---|---|---|"]
    for s in t.seeds:
        summ, rl, gr = t.summary[s], t.rl[s], t.greedy[s]
        e = summ.get("actions_done") if summ else None
        n = len(solve_scores(rl))
        rl_n = t.curve(solve_scores(rl), [n]).get(n) if n else None
        pool = t.sft_samples_of(s)          # every sample of the policy this seed started from
        if e is not None and n and len(pool) >= e + n:
            sft_en = base._fmt(t.curve(pool, [e + n]).get(e + n))
        else:
            sft_en = f"— ({len(pool)} SFT samples < E+N)" if e is not None else "—"
        g = f"{base._fmt(gr['best'])} ({gr['n']} programs)" if gr else "not run"
        train_best = summ.get("best", {}).get(t.id) if summ else None
        lines.append(f"| {s} | {e if e is not None else '—'} | {base._fmt(rl_n)} | {sft_en} "
                     f"| {g} | {base._fmt(train_best)} |")
    return "\n".join(lines)


def _finite_mean(rows: list, key: str) -> Optional[float]:
    """The mean of `key` over the rows that logged a finite number for it, or None."""
    xs = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return sum(xs) / len(xs) if xs else None


def start_end_table(t: Task) -> str:
    """Per seed: the valid fraction and the mean score of the valid programs over the first
    and the last fifth of the updates (at least one update each): does the run end better
    than it starts?"""
    lines = [f"| seed | updates | valid fraction, first → last fifth | mean {t.metric} of valid "
             "programs, first → last fifth |", "|---|---|---|---|"]
    for s in t.seeds:
        rows = t.metrics.get(s) or []
        if not rows:
            continue
        q = max(1, len(rows) // 5)
        cells = []
        for key in ("valid_frac", "score_mean_valid"):
            a, b = _finite_mean(rows[:q], key), _finite_mean(rows[-q:], key)
            cells.append(f"{base._fmt(a)} → {base._fmt(b)}")
        lines.append(f"| {s} | {len(rows)} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) if len(lines) > 2 else ""


DRIFT = (("kl_ref", "KL to the SFT policy (per token)", 3), ("entropy", "entropy (per token)", 3),
         ("response_tokens", "response tokens per batch", 0), ("valid_frac", "valid fraction", 3))


def drift_table(t: Task) -> str:
    """Per seed, each quantity of DRIFT over the five fifths of the updates: a run that ends
    worse than it starts shows here whether its policy drifted away from the SFT policy
    (the KL, the entropy and the length growing as the valid fraction falls)."""
    lines = ["| seed | quantity | fifths of the updates, first → last |", "|---|---|---|"]
    for s in t.seeds:
        rows = t.metrics.get(s) or []
        if len(rows) < 5:
            continue
        cuts = [round(i * len(rows) / 5) for i in range(6)]
        for key, label, digits in DRIFT:
            means = [_finite_mean(rows[a:b], key) for a, b in zip(cuts, cuts[1:])]
            if any(m is not None for m in means):
                lines.append(f"| {s} | {label} | "
                             + " → ".join(base._fmt(m, digits) for m in means) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def training_figure(t: Task, png: pathlib.Path) -> Optional[pathlib.Path]:
    series = lambda key: [[r.get(key, math.nan) for r in rows]   # noqa: E731
                          for rows in t.metrics.values() if rows]
    if not any(series("valid_frac")):
        return None
    return curves.plot_training_bands(
        {"valid fraction": {"RL": series("valid_frac")},
         f"mean {t.metric} of valid programs": {"RL": series("score_mean_valid")},
         "reward mean": {"RL": series("reward_mean")}},
        png, title=f"{t.id}: per update, smoothed over 5, band = min..max over seeds")


def best_at_k_figure(t: Task, found: dict, png: pathlib.Path) -> Optional[pathlib.Path]:
    if not found["ks"]:
        return None
    mean = {lab: {k: found[key][k][0] for k in found["ks"] if found[key][k][0] is not None}
            for lab, key in (("SFT", "sft"), ("RL", "rl"))}
    band = {lab: ({k: found[key][k][0] - found[key][k][1] for k in mean[lab]},
                  {k: found[key][k][0] + found[key][k][1] for k in mean[lab]})
            for lab, key in (("SFT", "sft"), ("RL", "rl"))}
    return curves.plot_best_at_k(mean, png, title=f"{t.id} (mean ± std over seeds)",
                                 metric=t.metric, is_lower_better=t.lower, bands=band,
                                 baselines={"sample submission": t.baseline})


def families(t: Task) -> str:
    s = t.seeds[0] if t.seeds else None
    if s is None or not t.metrics[s]:
        return ""
    out = [f"Model families over training (seed {s}):", "", base.family_table(
        t.dir / f"seed{s}" / "rl")]
    times = [r.get("duration_mean_s") for r in t.metrics[s] if r.get("duration_mean_s")]
    if times:
        q = max(1, len(times) // 4)
        out.append(f"Mean action time: first quarter {sum(times[:q]) / q:.2f} s, last quarter "
                   f"{sum(times[-q:]) / q:.2f} s.\n")
    return "\n".join(out)


def _by_family(evs: dict) -> dict:
    """family -> solve scores (None = invalid), pooled over the seeds whose evaluation
    recorded each sample's family (evaluate.py's `sample_families`)."""
    out: dict = {}
    for ev in evs.values():
        if not ev or not ev.get("sample_families"):
            continue
        for fam, score, mode in zip(ev["sample_families"], ev["scores"], ev["modes"]):
            if mode == "solve":
                out.setdefault(fam or "none", []).append(score)
    return out


def family_eval_table(t: Task) -> str:
    """Which families the SFT and the RL policy sample at evaluation, and how good each
    family's programs are: where RL thins the tail, the family that held the SFT policy's
    best programs is the one whose share fell."""
    sft, rl = _by_family(t.sft), _by_family(t.rl)
    if not sft or not rl:
        return ""
    n_s, n_r = sum(map(len, sft.values())), sum(map(len, rl.values()))

    def cells(xs: list, n: int) -> str:
        valid = [x for x in xs if x is not None]
        if not xs:
            return "0% | — | —"
        best = (min if t.lower else max)(valid) if valid else None
        mean = sum(valid) / len(valid) if valid else None
        return f"{100 * len(xs) / n:.0f}% | {base._fmt(best)} | {base._fmt(mean)}"

    fams = sorted(set(sft) | set(rl), key=lambda f: (-len(sft.get(f, [])) - len(rl.get(f, [])), f))
    seeds = sorted(s for s in t.seeds if (t.sft[s] or {}).get("sample_families"))
    lines = [f"Families at evaluation (solve samples pooled over seeds {', '.join(map(str, seeds))}"
             f"; best and mean of the valid programs, {t.metric}):", "",
             "| family | SFT share | SFT best | SFT mean | RL share | RL best | RL mean |",
             "|---|---|---|---|---|---|---|"]
    for f in fams:
        lines.append(f"| {f} | {cells(sft.get(f, []), n_s)} | {cells(rl.get(f, []), n_r)} |")
    return "\n".join(lines)


def family_by_seed(t: Task) -> str:
    """Where each seed's policy went: the leading family of its training batches in each
    third of the updates (solve and improve prompts pooled) and its two leading families at
    evaluation (solve samples only), each with the best of its valid programs. Seeds that
    collapse onto different families end with different tails: the pooled tables hide that."""
    rows, pick = [], (min if t.lower else max)
    for s in t.seeds:
        labels, share = base.family_phases(t.dir / f"seed{s}" / "rl")
        leaders = [max(share, key=lambda f: share[f][i]) for i in range(len(labels))]
        train = " → ".join(f"{f} {share[f][i]:.0%}" for i, f in enumerate(leaders))
        ev = _by_family({s: t.rl[s]})
        n = sum(map(len, ev.values()))
        lead = []
        for f, xs in sorted(ev.items(), key=lambda kv: -len(kv[1]))[:2]:
            valid = [x for x in xs if x is not None]
            lead.append(f"{f} {len(xs) / n:.0%} (best {base._fmt(pick(valid) if valid else None)})")
        if train or lead:
            rows.append(f"| {s} | {train or '—'} | {', '.join(lead) or '—'} |")
    if not rows:
        return ""
    return "\n".join([
        f"Where each seed went (leading family and its share; {t.metric} of the best valid "
        "program of that family at evaluation):", "",
        "| seed | training batches, thirds of the updates | evaluation, solve samples |",
        "|---|---|---|"] + rows)


def _temperature_text(tasks: list) -> str:
    """The evaluations' sampling temperatures, and a warning where SFT and RL differ: a
    policy sampled cooler or hotter is another distribution, and the tables then compare
    sampling settings as much as policies."""
    fmt = lambda ts: "/".join(f"{x:g}" for x in sorted(ts)) or "—"  # noqa: E731
    sft = set().union(*[t.temperatures("sft") for t in tasks])
    rl = set().union(*[t.temperatures("rl") for t in tasks])
    if sft == rl:
        return f"temperature {fmt(sft)}"
    return (f"**SFT sampled at temperature {fmt(sft)}, RL at {fmt(rl)}: not the same "
            "sampling, so not comparable as policies**")


def run_line(t: Task) -> str:
    parts = []
    for s in t.seeds:
        summ = t.summary[s]
        if summ:
            fp = t.policy.get(s)
            parts.append(f"seed {s}: {summ['updates']} updates in {summ['wall_s'] / 60:.1f} min, "
                         f"{summ.get('programs_per_hour', '—')} programs/h"
                         + (f", SFT policy {fp}" if fp else ""))
    return "; ".join(parts)


def build(out_dir: pathlib.Path, md: pathlib.Path) -> str:
    meta = base._json(out_dir / "rl_gain.json") or {}
    tasks = [Task(d) for d in sorted(out_dir.iterdir()) if d.is_dir() and any(d.glob("seed*"))]
    head = ["# RL's gain over the SFT policy: best@k at every k, and at equal compute", "",
            "Produced by `launch/rl_gain.sh` (" + ", ".join(
                f"{k}={v}" for k, v in meta.items() if k not in ("tasks", "seeds"))
            + "; the last invocation's settings). Runs on disk: " + "; ".join(
                f"{t.id} seeds {', '.join(map(str, t.seeds))}" for t in tasks)
            + ". best@k: the unbiased estimate of the expected best of k programs from the "
            f"N i.i.d. solve samples of each policy ({_temperature_text(tasks)}); an invalid program "
            "counts as the sample submission. Mean ± std (sample std) over seeds.", ""]
    summary = ["| task | metric | RL ≥ SFT at every k | best@1 ahead by > 1 std "
               "| best@32 ahead by > 1 std | RL ≥ SFT at every k, SFT from all its samples |",
               "|---|---|---|---|---|---|"]
    body = []
    for t in tasks:
        table, found = best_at_k_table(t)
        pooled, pooled_ahead = pooled_sft_table(t, found)
        arrow = "↓" if t.lower else "↑"
        mixed = len(t.policies) > 1
        pooled_cell = (f"— ({len(t.policies)} SFT policies)" if mixed
                       else _yes_no(pooled_ahead, "—"))
        summary.append(f"| {t.id} | {t.metric} {arrow} | {'yes' if found['ahead_every_k'] else 'no'} "
                       f"| {_yes_no(found['clear@1']) if 'clear@1' in found else '—'} "
                       f"| {_yes_no(found['clear@32']) if 'clear@32' in found else '—'} "
                       f"| {pooled_cell} |")
        body += [f"## {t.id} ({t.metric} {arrow}; sample submission {base._fmt(t.baseline)})",
                 "", run_line(t), "", table, ""]
        if mixed:
            body += [f"The seeds started from {len(t.policies)} SFT policies ("
                     + ", ".join(f"seed {s}: {t.policy.get(s) or 'not recorded'}" for s in t.seeds)
                     + "; one source built on two machines can be two policies). Each seed's RL "
                     "is compared with its own SFT policy's samples; the mean ± std over seeds "
                     "spans the builds as well as the seeds, and samples of different policies "
                     "are not pooled.", ""]
        png = best_at_k_figure(t, found, md.parent / f"{md.stem}_files" / f"{t.id}_best_at_k.png")
        if png:
            body += [f"![best@k, {t.id}]({base._rel(png, md)})", ""]
        body += [f"Equal compute ({t.metric} {arrow}; E = programs the RL run executed, N = "
                 "its evaluation samples; the SFT policy's best@(E+N) from all its samples):",
                 "", equal_compute_table(t), ""]
        if pooled:
            body += ["The SFT policy's best@k from all its solve samples (every seed's and the "
                     "extra pool's; one policy, so they pool: a tighter estimate than one seed's "
                     "N, and the only one beyond k = N), beside RL's mean over seeds:", "",
                     pooled, ""]
        png = training_figure(t, md.parent / f"{md.stem}_files" / f"{t.id}_training.png")
        if png:
            body += [f"![training, {t.id}]({base._rel(png, md)})", ""]
        start_end = start_end_table(t)
        if start_end:
            body += ["Start and end of each RL run (means over the first and the last fifth "
                     "of its updates):", "", start_end, ""]
        drift = drift_table(t)
        if drift:
            body += ["How far each policy moved from the SFT policy (means over each fifth of "
                     "the updates):", "", drift, ""]
        body += [families(t), ""]
        fam_eval = family_eval_table(t)
        if fam_eval:
            body += [fam_eval, ""]
        by_seed = family_by_seed(t)
        if by_seed:
            body += [by_seed, ""]
    return "\n".join(head + ["## Summary", ""] + summary + [""] + body)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out_dir", required=True)
    p.add_argument("--out", default="experiments/results/rl_gain.md")
    a = p.parse_args(argv)
    out_dir, md = pathlib.Path(a.out_dir), pathlib.Path(a.out)
    if not out_dir.is_dir():
        print(f"error: --out_dir {out_dir} does not exist (run launch/rl_gain.sh first).",
              file=sys.stderr)
        return 2
    kept = keep_files(out_dir, md)
    base._write(build(kept if kept.is_dir() else out_dir, md), md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
