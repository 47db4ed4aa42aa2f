"""Best@k per model family, from the samples of `experiments/evaluate.py`.

The learner's default objective is the expected best of k = 8 programs (`--advantage=max_at_k
--best_of_k=8`). A policy that writes one model family only has that family's best@k as its
objective, so if the objective settles on one family, it is worth knowing which family is on
top at k = 8 and whether the same one is on top at k = 128, the evaluation's k. This tool reads
an SFT evaluation (and optionally the RL policy's) and prints, per family, its solve samples,
valid ones, mean valid score and best@k over its own samples (invalid = the shared floor, as in
the report). For each k it names the family on top ("J_k's family", among families with at
least k samples; with a dozen samples of a family its best@8 is a rough estimate).

    python experiments/family_tails.py runs/rl_gain/<task>/seed0/sft.json [rl_eval.json]
    python experiments/family_tails.py --runs=experiments/results/rl_gain_build5_fix_files

`--credit` adds, per family, the learner's max@k credit over groups drawn from the samples,
with each group divided by its own std (the learner's default), each update divided by the
spread of its valid scores (`--best_of_k_scale=scores`), and one scale for all: which families
the first updates push up, and how much of that is the scale.

With `--runs`, one line per task and seed of a `launch/rl_gain.sh` folder: the SFT samples'
J_8 family, the family the RL policy samples most, and both policies' best@128.
"""

import argparse
import json
import pathlib
import sys
from typing import Optional

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from mle_rl.agent import best_at_k as bak  # noqa: E402


def load(path: pathlib.Path) -> dict:
    """The one task of an evaluate.py JSON."""
    d = json.loads(pathlib.Path(path).read_text())
    if len(d) != 1:
        raise ValueError(f"{path}: {len(d)} tasks; give an evaluation of one task")
    return next(iter(d.values()))


def _solve(ev: dict) -> list:
    """(family, score or None) of the solve samples."""
    if "sample_families" not in ev:
        raise ValueError("no per-sample families (evaluate.py records them since commit c984cc6)")
    return [(f, s) for f, s, m in zip(ev["sample_families"], ev["scores"], ev["modes"])
            if m == "solve"]


def common_floor(evs: list) -> Optional[float]:
    every = [s for ev in evs for _, s in _solve(ev)]
    return bak.floor_of(every, evs[0].get("sample_submission_score"),
                        bool(evs[0]["is_lower_better"]))


def family_table(ev: dict, floor: float, ks=None) -> dict:
    """family -> {n, valid, share, mean, best_at_k: {k: value}} over its own solve samples."""
    lower = bool(ev["is_lower_better"])
    by: dict = {}
    for f, s in _solve(ev):
        by.setdefault(f, []).append(s)
    total = sum(len(v) for v in by.values())
    out = {}
    for f, scores in by.items():
        valid = [s for s in scores if s is not None and np.isfinite(s)]
        out[f] = {"n": len(scores), "valid": len(valid), "share": len(scores) / total,
                  "mean": float(np.mean(valid)) if valid else None,
                  "best_at_k": bak.best_at_k(scores, ks or bak.powers_of_two(len(scores)),
                                             is_lower_better=lower, floor=floor)}
    return out


def top_family(table: dict, k: int, lower: bool) -> Optional[str]:
    """The family with the best best@k among those with at least k samples."""
    have = {f: r["best_at_k"][k] for f, r in table.items() if k in r["best_at_k"]}
    if not have:
        return None
    return (min if lower else max)(have, key=have.get)


DRAWS = 4096   # groups drawn by credit_table


def credit_table(ev: dict, k: int, group: int, draws: int = DRAWS, seed: int = 0) -> dict:
    """family -> the max@k gradient on its logit (were the family a softmax choice with the
    samples' shares p_f): sum_b A_b (1[f_b = f] - p_f), mean over groups of
    `group` programs drawn without replacement from the solve samples (their rewards as
    rl4mle gives them: the signed score, a failure -10). Three scales: "group", each group
    divided by its own std (the learner's default, --best_of_k_scale=group); "scores", two
    groups to an update (the flagfile's batch), each update divided by the std of its valid
    scores (--best_of_k_scale=scores); "run", every group divided by one std over all draws
    (the unbiased J_k gradient up to a constant). The failure term (--best_of_k_valid_coef)
    is left out: it is the same on every scale."""
    import jax
    import jax.numpy as jnp
    from mle_rl.env import rewards
    from mle_rl.rl import group_advantages as ga
    lower = bool(ev["is_lower_better"])
    solve = _solve(ev)
    fam = np.array([f for f, _ in solve])
    ok = np.array([s is not None and np.isfinite(s) for _, s in solve])
    r = np.array([(-s if lower else s) if good else rewards.FAILURE_REWARD
                  for (_, s), good in zip(solve, ok)], np.float32)
    if len(r) < group:
        raise ValueError(f"{len(r)} solve samples, fewer than a group of {group}")
    rng = np.random.default_rng(seed)
    per = 64                                      # groups per call; pairs are updates
    gid = jnp.repeat(jnp.arange(per), group)
    pair = jnp.repeat(jnp.arange(2), group)
    scores_scale = jax.vmap(lambda s, v: ga.max_at_k(s, pair, k, valid=v, scale="scores"))
    rows, adv = [], {"group": [], "scores": [], "run": []}
    for _ in range(max(1, draws // per)):
        idx = np.concatenate([rng.choice(len(r), group, replace=False) for _ in range(per)])
        s = jnp.asarray(r[idx])
        valid = jnp.asarray(ok[idx], jnp.float32)
        adv["group"].append(np.asarray(ga.max_at_k(s, gid, k, normalize_std=True)))
        adv["scores"].append(np.asarray(scores_scale(s.reshape(per // 2, -1),
                                                     valid.reshape(per // 2, -1))).ravel())
        adv["run"].append(np.asarray(ga.max_at_k(s, gid, k, normalize_std=False)))
        rows.append(fam[idx])
    fams = np.concatenate(rows)
    n_groups = len(fams) / group
    names, counts = np.unique(fam, return_counts=True)
    share = dict(zip(names, counts / len(fam)))
    out = {}
    for scale, parts in adv.items():
        a = np.concatenate(parts)
        if scale == "run":
            a = a / max(float(a.std()), 1e-12)
        # The gradient on family f's logit, were the family a softmax choice: sum_b A_b
        # (1[f_b = f] - p_f) (max@k's advantages need not sum to zero over a group).
        out[scale] = {f: float((a[fams == f].sum() - share[f] * a.sum()) / n_groups)
                      for f in names}
    return out


def render(evs: list, names: list, credit: Optional[tuple] = None) -> str:
    """The per-family tables; with `credit` = (k, group size), each one's credit_table."""
    floor = common_floor(evs)
    if floor is None:
        return "no valid sample and no sample-submission score: no floor, no best@k"
    lower = bool(evs[0]["is_lower_better"])
    ks = bak.powers_of_two(max(len(_solve(ev)) for ev in evs))
    lines = [f"metric {evs[0]['metric']} ({'lower' if lower else 'higher'} is better); "
             f"invalid = {-floor if lower else floor:.4f}"]
    for ev, name in zip(evs, names):
        table = family_table(ev, floor, ks)
        cols = [k for k in ks if any(k in r["best_at_k"] for r in table.values())]
        lines += ["", f"{name}: {len(_solve(ev))} solve samples",
                  "| family | n | valid | mean valid | " + " | ".join(f"@{k}" for k in cols) + " |",
                  "|---|---|---|---|" + "---|" * len(cols)]
        for f, r in sorted(table.items(), key=lambda x: -x[1]["n"]):
            mean = "-" if r["mean"] is None else f"{r['mean']:.4f}"
            cells = [f"{r['best_at_k'][k]:.4f}" if k in r["best_at_k"] else "" for k in cols]
            lines.append(f"| {f} | {r['n']} | {r['valid']} | {mean} | " + " | ".join(cells) + " |")
        tops = [f"@{k} {top_family(table, k, lower)}" for k in cols]
        lines.append("J_k's family (top best@k among families with >= k samples): "
                     + ", ".join(tops))
        if credit:
            c = credit_table(ev, *credit)
            lines += ["", f"{name}: max@{credit[0]} credit per group of {credit[1]}: the gradient on "
                      "each family's logit, sum_b A_b (1[f_b = f] - p_f), mean over "
                      f"{DRAWS:,} drawn groups",
                      "| family | each group by its std (default) | each update by its "
                      "valid scores' std | one scale for all |", "|---|---|---|---|"]
            lines += [f"| {f} | {c['group'][f]:+.3f} | {c['scores'][f]:+.3f} | "
                      f"{c['run'][f]:+.3f} |"
                      for f in sorted(c["group"], key=lambda f: -c["group"][f])]
    return "\n".join(lines)


def runs_lines(root: pathlib.Path, k: int) -> list:
    lines = [f"| task | seed | SFT's J_{k} family (its best@{k}) | RL's commonest family (share) | "
             "SFT best@max | RL best@max |", "|---|---|---|---|---|---|"]
    for sft in sorted(root.glob("*/seed*/sft.json")):
        rl = sft.with_name("rl_eval.json")
        if not rl.is_file():
            continue
        a, b = load(sft), load(rl)
        try:
            floor = common_floor([a, b])
        except ValueError as e:
            lines.append(f"| {sft.parts[-3]} | {sft.parts[-2]} | {e} | | | |")
            continue
        if floor is None:
            continue
        lower = bool(a["is_lower_better"])
        ta, tb = family_table(a, floor, [k]), family_table(b, floor)
        fam = top_family(ta, k, lower)
        best = f"{fam} ({ta[fam]['best_at_k'][k]:.4f})" if fam else "-"
        common = max(tb, key=lambda f: tb[f]["share"])
        sa, sb = [s for _, s in _solve(a)], [s for _, s in _solve(b)]
        n = min(len(sa), len(sb))
        ka = bak.best_at_k(sa, [n], is_lower_better=lower, floor=floor)
        kb = bak.best_at_k(sb, [n], is_lower_better=lower, floor=floor)
        lines.append(f"| {sft.parts[-3]} | {sft.parts[-2]} | {best} | {common} "
                     f"({tb[common]['share']:.0%}) | @{n} {ka.get(n, float('nan')):.4f} | "
                     f"@{n} {kb.get(n, float('nan')):.4f} |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("evals", nargs="*", type=pathlib.Path,
                   help="evaluate.py JSONs of one task (e.g. sft.json rl_eval.json)")
    p.add_argument("--runs", type=pathlib.Path,
                   help="a launch/rl_gain.sh output folder: one line per task and seed")
    p.add_argument("--k", type=int, default=8,
                   help="the learner's k (the flagfile's --best_of_k): --runs names the SFT "
                        "samples' top family at this k; --credit's objective")
    p.add_argument("--credit", action="store_true",
                   help="also the max@k credit per family over groups drawn from each "
                        "evaluation's samples, on three scales (credit_table)")
    p.add_argument("--group_size", type=int, default=8,
                   help="--credit: programs per group (the flagfile's)")
    args = p.parse_args(argv)
    if args.k < 1 or args.group_size < 2:
        p.error("--k must be >= 1 and --group_size >= 2")
    if args.runs:
        if args.evals:
            p.error("--runs takes no evaluation files")
        if not args.runs.is_dir():
            p.error(f"--runs: no folder {args.runs}")
        print("\n".join(runs_lines(args.runs, args.k)))
        return 0
    if not args.evals:
        p.error("give one or more evaluate.py JSONs (e.g. sft.json rl_eval.json)")
    missing = [str(e) for e in args.evals if not e.is_file()]
    if missing:
        p.error(f"no such file: {', '.join(missing)}")
    try:
        print(render([load(e) for e in args.evals], [e.stem for e in args.evals],
                     (args.k, args.group_size) if args.credit else None))
    except ValueError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
