"""Markdown tables for the reproduction scripts in launch/ (table1, ablations, cpu_demo).

    python experiments/report.py check     --out_dir=D --mlebench_dir=M --base_ckpt=C [--tasks=...]
    python experiments/report.py table1    --out_dir=D [--out=D/table1.md]
    python experiments/report.py ablations --out_dir=D [--out=D/ablations.md]
    python experiments/report.py cpu_demo  --out_dir=D [--out=experiments/results/cpu_demo.md]

`check` decides which paper tasks can run: it writes D/table1_status.json, prints for each
missing task what is missing and how to prepare it (on stderr), and the ids that can run
(one per line, on stdout). The other commands only read what the runs wrote:
WORKDIR/{metrics.jsonl, summary.json, reward_curve.png} from experiments/run.py and
PREFIX.json from experiments/evaluate.py; a number that is not on disk is never shown.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import re
import shutil
import sys
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAPER_DIR = ROOT / "experiments" / "paper"
# Ablation (launch/ablations.sh switches the idea off) -> the paper's change in score (%).
ABLATIONS = {"full": None, "no_duration_weights": -3.85, "no_instrumentation": -22.06,
             "no_self_improve": -8.0}


# ----------------------------------------------------------------------------- reading


# The paper's best-of-128 after RL (DESIGN.md); the tasks with a flagfile in experiments/paper/.
PAPER = {
    "detecting-insults-in-social-commentary": 0.895,
    "random-acts-of-pizza": 0.663,
    "tweet-sentiment-extraction": 0.596,
    "tabular-playground-series-may-2022": 0.913,
    "leaf-classification": 0.124,
    "nomad2018-predict-transparent-conductors": 0.059,
    "spooky-author-identification": 0.404,
    "lmsys-chatbot-arena": 1.081,
}


def paper_tasks(paper_dir=PAPER_DIR) -> dict:
    """{task id: paper score} for the tasks that have a flagfile in `paper_dir`."""
    have = {f.stem for f in pathlib.Path(paper_dir).glob("*.flags")}
    return {t: PAPER.get(t) for t in sorted(have)}


def _json(path) -> Optional[dict]:
    path = pathlib.Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def _metrics(workdir) -> list:
    f = pathlib.Path(workdir) / "metrics.jsonl"
    if not f.is_file():
        return []
    rows = []
    for line in f.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue                  # a line cut by a kill; the rest is still good
    return rows


def _eval(prefix, task_id) -> Optional[dict]:
    """The evaluate.py record of one task, or None when the evaluation did not run."""
    data = _json(f"{prefix}.json")
    return None if data is None else data.get(task_id)


def _fmt(x, digits=4) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _arrow(lower_better) -> str:
    return "" if lower_better is None else ("↓" if lower_better else "↑")


def _best_cell(ev: Optional[dict]) -> str:
    if ev is None:
        return "not evaluated"
    if ev.get("best") is None:
        return f"no valid submission ({ev['valid']}/{ev['n']} valid)"
    return f"{ev['best']:.4f}"


def _rel(path, md_path) -> str:
    return os.path.relpath(path, pathlib.Path(md_path).parent)


def _write(md: str, out) -> None:
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    print(md)


# ----------------------------------------------------------------------------- check


def missing_for(task_id: str, mlebench_dir: str, base_ckpt: str) -> list:
    """[(kind, what is missing, command that prepares it, note)] for one paper task; [] when
    it can run. kind: "weights" | "data" | "answers"."""
    from mle_rl.env import mlebench
    out = []
    ckpt = pathlib.Path(base_ckpt)
    has_weights = ckpt.is_dir() and (any(ckpt.glob("*.safetensors"))
                                     or (ckpt / "model.safetensors.index.json").is_file())
    has_tok = (ckpt / "tokenizer.json").is_file() or (ckpt / "tokenizer_config.json").is_file()
    if not ((ckpt / "config.json").is_file() and has_weights and has_tok):
        out.append(("weights", f"base checkpoint {ckpt} (config.json, *.safetensors, tokenizer)",
                    f"huggingface-cli download Qwen/Qwen2.5-3B-Instruct --local-dir {ckpt}",
                    "on a machine with internet, then copy the directory here; "
                    "BUILD.md, Model checkpoints"))
    prepare = (f"mlebench prepare -c {task_id} --data-dir {mlebench_dir}",
               "needs Kaggle credentials; BUILD.md, MLE-bench data")
    root = mlebench.prepared_root(mlebench_dir, task_id)
    if root is None:
        out.append(("data", f"MLE-bench data {pathlib.Path(mlebench_dir) / task_id}/prepared/"
                    f"{{public,private}}", *prepare))
    elif not any((root / "private" / a).is_file() for a in mlebench.SPECS[task_id].answers_files):
        out.append(("answers", f"answers ({', '.join(mlebench.SPECS[task_id].answers_files)}) in "
                    f"{root / 'private'}", *prepare))
    return out


def cmd_check(a) -> int:
    paper = paper_tasks(a.paper_dir)
    ids = a.tasks.split(",") if a.tasks else list(paper)
    unknown = [t for t in ids if t not in paper]
    if unknown:
        print(f"error: no paper flagfile for {', '.join(unknown)} in {a.paper_dir}; "
              f"known: {', '.join(paper)}.", file=sys.stderr)
        return 2
    status, told = {}, set()
    for t in ids:
        miss = missing_for(t, a.mlebench_dir, a.base_ckpt)
        status[t] = {"paper": paper[t],
                     "missing": [{"kind": k, "what": w, "how": h, "note": n}
                                 for k, w, h, n in miss]}
        if not miss:
            print(t)
        for _, w, h, n in miss:
            print(f"[table1] skip {t}: missing {w}" if w not in told else
                  f"[table1] skip {t}: missing {w} (see above)", file=sys.stderr)
            if w not in told:
                print(f"    prepare: {h}    ({n})", file=sys.stderr)
            told.add(w)
    out = pathlib.Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table1_status.json").write_text(json.dumps(
        {"mlebench_dir": a.mlebench_dir, "base_ckpt": a.base_ckpt, "tasks": status}, indent=2))
    return 0


# ----------------------------------------------------------------------------- table 1


def table1(out_dir) -> str:
    """Paper vs ours for every task checked by `check`, with the reason a task did not run."""
    from mle_rl.env import mlebench
    out_dir = pathlib.Path(out_dir)
    status = _json(out_dir / "table1_status.json")
    if status is None:
        raise FileNotFoundError(f"{out_dir / 'table1_status.json'} is missing; run "
                                f"`report.py check` (launch/table1.sh does) first.")
    lines = ["# RL for MLE agents: Table 1, paper vs ours", "",
             f"Data: `{status['mlebench_dir']}`; base checkpoint: `{status['base_ckpt']}`. "
             "Paper: best of 128 after RL (Qwen2.5-3B, 1-3 days per task on 8×A100). Ours: "
             "best of N after RL with our budget, both modes (solve, improve the best).", "",
             "| task | metric | paper | ours | valid | best mode | RL updates | status |",
             "|---|---|---|---|---|---|---|---|"]
    missing = []
    for t, st in status["tasks"].items():
        spec = mlebench.SPECS.get(t)
        metric = f"{spec.metric} {_arrow(spec.is_lower_better)}" if spec else "?"
        paper = _fmt(st["paper"], 3)
        if st["missing"]:
            kinds = ", ".join(m["kind"] for m in st["missing"])
            lines.append(f"| {t} | {metric} | {paper} | not run | — | — | — | missing: {kinds} |")
            missing.extend(m for m in st["missing"] if m not in missing)
            continue
        d = out_dir / t
        summ = _json(d / "run" / "summary.json")
        outcome = (d / "outcome.txt").read_text().strip() if (d / "outcome.txt").is_file() \
            else "not run"
        ev = _eval(d / "eval", t) if outcome == "ok" else None    # never a stale number
        n = ev["n"] if ev else None
        valid = f"{ev['valid']}/{n}" if ev else "—"
        mode = (ev.get("best_mode") or "—") if ev else "—"
        ups = f"{summ['updates']} ({summ['wall_s']} s)" if summ else "—"
        lines.append(f"| {t} | {metric} | {paper} | {_best_cell(ev)} | {valid} | {mode} | "
                     f"{ups} | {outcome} |")
    if missing:
        lines += ["", "## Missing: prepare these, then run launch/table1.sh again", ""]
        lines += [f"* {m['what']}: `{m['how']}` ({m['note']})" for m in missing]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- ablations


def _mean_std(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    m = sum(xs) / len(xs)
    if len(xs) == 1:
        return f"{m:.4f}"
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return f"{m:.4f} ± {sd:.4f}"


def _tail_mean(rows: list, key: str, frac: float = 0.25) -> Optional[float]:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    if not vals:
        return None
    k = max(1, int(len(vals) * frac))
    return sum(vals[-k:]) / k


def first_valid_update(rows: list) -> Optional[int]:
    """The first update (metrics.jsonl rows) whose batch held a valid program, or None."""
    return next((r["step"] for r in rows if (r.get("valid_frac") or 0) > 0), None)


def ablation_rows(out_dir) -> tuple:
    """-> (task id, metric, lower_better, {variant: {seed: record}}) from OUT/<variant>/seed<k>/."""
    out_dir = pathlib.Path(out_dir)
    meta = _json(out_dir / "ablations.json") or {}
    task = meta.get("task")
    runs, metric, lower = {}, None, None
    for v in [v for v in ABLATIONS if (out_dir / v).is_dir()]:
        for sd in sorted((out_dir / v).glob("seed*")):
            ev = _eval(sd / "eval", task)
            if ev is not None:
                metric, lower = ev["metric"], ev["is_lower_better"]
            rows = _metrics(sd / "run")
            first_valid = first_valid_update(rows)
            runs.setdefault(v, {})[sd.name] = {
                "eval": ev, "summary": _json(sd / "run" / "summary.json"),
                "first_valid": first_valid, "updates": len(rows),
                "reward_tail": _tail_mean(rows, "reward_mean"),
                "duration_tail": _tail_mean(rows, "duration_mean_s"),
                "families": _family_totals(sd / "run")}
    return task, metric, lower, runs


def _best_or_floor(ev: Optional[dict]) -> Optional[float]:
    """A seed's best-of-N; the sample submission's score when no program was valid (None
    when not evaluated, or when the evaluation did not record that score)."""
    if not ev:
        return None
    return ev["best"] if ev.get("best") is not None else ev.get("sample_submission_score")


def ablation_table(out_dir) -> str:
    task, metric, lower, runs = ablation_rows(out_dir)
    lines = [f"Task `{task}`" + (f", {metric} {_arrow(lower)}" if metric else "") +
             ". Same budget per run; mean ± std over the seeds; a seed whose policy wrote no "
             "valid program counts as the sample submission (as best@k counts it).",
             "", "| variant | best-of-N | best@1 | seeds valid | Δ vs full | paper Δ | train "
             "reward (last 25%) | action s (last 25%) | top family | runs with a valid program "
             "in training (first at update) |", "|---|---|---|---|---|---|---|---|---|---|"]
    full = [_best_or_floor(r["eval"]) for r in runs.get("full", {}).values()]
    full = [b for b in full if b is not None]
    full_mean = sum(full) / len(full) if full else None
    for v, seeds in runs.items():
        bests = [_best_or_floor(r["eval"]) for r in seeds.values()]
        ok = [b for b in bests if b is not None]
        n_valid = sum(bool(r["eval"]) and r["eval"].get("best") is not None
                      for r in seeds.values())
        delta = "—"
        if v != "full" and ok and full_mean:
            rel = (sum(ok) / len(ok) - full_mean) / abs(full_mean) * 100
            delta = f"{(-rel if lower else rel):+.1f}%"   # + = better, whatever the direction
        paper = ABLATIONS[v]
        fams = {}
        for r in seeds.values():
            for k, c in r["families"].items():
                fams[k] = fams.get(k, 0) + c
        top = max(fams, key=fams.get) if fams else "—"
        top = f"{top} {fams[top] / sum(fams.values()):.0%}" if fams else top
        at1 = [r["eval"].get("best_at_k", {}).get("1") if r["eval"] else None
               for r in seeds.values()]
        firsts = [r["first_valid"] for r in seeds.values()]
        reached = [f for f in firsts if f is not None]
        lines.append(
            f"| {v} | {_mean_std(bests)} | {_mean_std(at1)} | {n_valid}/{len(bests)} | {delta} | "
            f"{'—' if paper is None else f'{paper:+.2f}%'} | "
            f"{_mean_std([r['reward_tail'] for r in seeds.values()])} | "
            f"{_mean_std([r['duration_tail'] for r in seeds.values()])} | {top} | "
            f"{len(reached)}/{len(firsts)} ({', '.join(map(str, reached)) or '—'}) |")
    if not runs:
        lines.append("| (no runs found) | | | | | | | | | |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- families


def _family_totals(workdir) -> dict:
    summ = _json(pathlib.Path(workdir) / "summary.json")
    return dict(summ.get("families", {})) if summ else {}


def family_phases(workdir, phases: int = 3) -> tuple:
    """-> ([phase labels], {family: [mean share per phase]}) from metrics.jsonl family/* keys."""
    rows = _metrics(workdir)
    if not rows:
        return [], {}
    k = max(1, math.ceil(len(rows) / phases))
    chunks = [rows[i:i + k] for i in range(0, len(rows), k)]
    fams = sorted({key[7:] for r in rows for key in r if key.startswith("family/")})
    labels = [f"steps {c[0]['step']}-{c[-1]['step']}" for c in chunks]
    share = {f: [sum(r.get(f"family/{f}", 0.0) for r in c) / len(c) for c in chunks]
             for f in fams}
    return labels, share


def family_table(workdir) -> str:
    labels, share = family_phases(workdir)
    if not labels:
        return "(no metrics)\n"
    lines = ["| family | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for f, xs in sorted(share.items(), key=lambda kv: -kv[1][-1]):
        lines.append(f"| {f} | " + " | ".join(f"{x:.0%}" for x in xs) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- cpu demo


# What the CPU demo's report keeps beside itself (runs/ is not committed): per run, its
# evaluations, summary, metrics and reward curve, under <report stem>_files/.
_KEEP = ("before.json", "after.json", "eval.json", "run/summary.json", "run/metrics.jsonl",
         "run/reward_curve.png", "rl/summary.json", "rl/metrics.jsonl", "rl/reward_curve.png")


def _demo_runs(out_dir: pathlib.Path) -> list:
    """Every directory of the demo that holds a run or an evaluation."""
    runs = [p for p in sorted(out_dir.glob("*/seed*")) if p.parent.name != "ablations"]
    return runs + sorted((out_dir / "ablations").glob("*/seed*"))


def keep_files(out_dir, md_path) -> pathlib.Path:
    """Copy the demo's small result files next to the report; returns the copy's root."""
    out_dir, md_path = pathlib.Path(out_dir), pathlib.Path(md_path)
    dest = md_path.parent / f"{md_path.stem}_files"
    for meta in ("cpu_demo.json", "ablations/ablations.json"):   # what the tables are of
        if (out_dir / meta).is_file():
            (dest / meta).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out_dir / meta, dest / meta)
    for run in _demo_runs(out_dir):
        for src in [run / rel for rel in _KEEP] + sorted(run.glob("*_*.json")):
            if src.is_file():
                target = dest / src.relative_to(out_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
    return dest


def _best(ev: Optional[dict]) -> Optional[float]:
    return None if ev is None else ev.get("best")


def _better(a: Optional[float], b: Optional[float], lower: bool) -> Optional[bool]:
    """Whether `a` beats `b` (a missing score loses to any score); None when both miss."""
    if a is None and b is None:
        return None
    if b is None or a is None:
        return b is None
    return a < b if lower else a > b


def _valid(evs: list) -> str:
    evs = [e for e in evs if e is not None]
    return f"{sum(e['valid'] for e in evs)}/{sum(e['n'] for e in evs)}" if evs else "—"


def seed_pairs(out_dir, task_id) -> dict:
    """{seed: (SFT eval, RL eval, RL summary)} from OUT/<task>/seed<k>/."""
    d = pathlib.Path(out_dir) / task_id
    return {sd.name: (_eval(sd / "before", task_id), _eval(sd / "after", task_id),
                      _json(sd / "rl" / "summary.json"))
            for sd in sorted(d.glob("seed*"))}


def per_task_table(out_dir, tasks: list, n) -> tuple[str, int, int]:
    """The matched best-of-N table; returns (markdown, tasks where RL's mean is better,
    tasks compared)."""
    lines = [f"| task | metric | sample submission | SFT best-of-{n} | RL best-of-{n} | "
             "RL better (seeds) | valid SFT | valid RL | RL updates |",
             "|---|---|---|---|---|---|---|---|---|"]
    wins = compared = 0
    for t in tasks:
        pairs = seed_pairs(out_dir, t)
        evs = [e for b, a, _ in pairs.values() for e in (b, a) if e]
        if not evs:
            lines.append(f"| {t} | ? | — | not run | not run | — | — | — | — |")
            continue
        lower = evs[0]["is_lower_better"]
        before = [_best(b) for b, _, _ in pairs.values()]
        after = [_best(a) for _, a, _ in pairs.values()]
        seed_wins = [_better(a, b, lower) for a, b in zip(after, before)]
        ok_b, ok_a = [x for x in before if x is not None], [x for x in after if x is not None]
        if ok_b and ok_a:
            compared += 1
            wins += bool(_better(sum(ok_a) / len(ok_a), sum(ok_b) / len(ok_b), lower))
        upd = [str(s["updates"]) for _, _, s in pairs.values() if s]
        base = evs[0].get("sample_submission_score")
        lines.append(
            f"| {t} | {evs[0]['metric']} {_arrow(lower)} | {_fmt(base)} | {_mean_std(before)} | "
            f"{_mean_std(after)} | {sum(1 for w in seed_wins if w)}/{len(seed_wins)} | "
            f"{_valid([b for b, _, _ in pairs.values()])} | "
            f"{_valid([a for _, a, _ in pairs.values()])} | {', '.join(upd) or '—'} |")
    return "\n".join(lines) + "\n", wins, compared


def cross_table(out_dir, tasks: list, n) -> str:
    """Cross-task RL (trained on procedural tasks) next to the SFT policy and per-task RL,
    on the evaluation tasks, mean ± std over seeds."""
    out_dir = pathlib.Path(out_dir)
    seeds = sorted((out_dir / "cross").glob("seed*"))
    evals = sorted({p.stem[len("after_"):] for sd in seeds for p in sd.glob("after_*.json")})
    lines = [f"| task | metric | SFT best-of-{n} | cross-task RL best-of-{n} | cross better "
             f"(seeds) | per-task RL best-of-{n} | valid cross |", "|---|---|---|---|---|---|---|"]
    for t in [t for t in tasks if t in evals] + [t for t in evals if t not in tasks]:
        cross = [_eval(sd / f"after_{t}", t) for sd in seeds]
        sft = [_eval(out_dir / t / sd.name / "before", t) or _eval(sd / f"before_{t}", t)
               for sd in seeds]
        per = [a for _, a, _ in seed_pairs(out_dir, t).values()]
        ref = next((e for e in cross + sft if e), None)
        lower = ref["is_lower_better"] if ref else False
        wins = [_better(_best(c), _best(b), lower) for c, b in zip(cross, sft)]
        lines.append(
            f"| {t} | {ref['metric'] + ' ' + _arrow(lower) if ref else '?'} | "
            f"{_mean_std([_best(e) for e in sft])} | {_mean_std([_best(e) for e in cross])} | "
            f"{sum(1 for w in wins if w)}/{len(wins)} | "
            f"{_mean_std([_best(e) for e in per]) if per else '—'} | {_valid(cross)} |")
    return "\n".join(lines) + "\n"


def cpu_demo(out_dir, md_path) -> str:
    out_dir = pathlib.Path(out_dir)
    files = keep_files(out_dir, md_path) if (out_dir / "cpu_demo.json").is_file() else None

    def link(png):   # the kept copy when there is one
        kept = files / png.relative_to(out_dir) if files else None
        return _rel(kept if kept is not None and kept.is_file() else png, md_path)
    meta = _json(out_dir / "cpu_demo.json") or {}
    tasks = meta.get("tasks") or sorted(p.name for p in out_dir.iterdir()
                                        if any(p.glob("seed*/rl")))
    n = meta.get("n", "N")
    table, wins, compared = per_task_table(out_dir, tasks, n)
    lines = ["# The whole story on CPU", "",
             f"Default policy built from nothing by the warm start; then per task and seed: "
             f"best-of-{n} of the SFT policy, RL for {meta.get('steps', '?')} updates, best-of-"
             f"{n} of the RL policy, with the same seed and N (matched samples). Mean ± std "
             f"over seeds {meta.get('seeds', '?')}. Machine: {meta.get('machine', '?')}.", "",
             f"**RL's mean best-of-{n} is better than the SFT policy's on {wins} of {compared} "
             "tasks.**", "", table]
    if (out_dir / "cross").is_dir():
        lines += ["## Cross-task RL (ML-Agent's protocol)", "",
                  f"Trained on {meta.get('cross_train', '?')} procedural tasks for "
                  f"{meta.get('cross_steps', '?')} updates per seed, evaluated on tasks it never "
                  "trained on.", "", cross_table(out_dir, tasks, n)]
    lines += ["## Reward curves", ""]
    for t in tasks:
        for sd in sorted((out_dir / t).glob("seed*")):
            png = sd / "rl" / "reward_curve.png"
            lines.append(f"* {t} {sd.name}: ![{t} {sd.name}]({link(png)})" if png.is_file()
                         else f"* {t} {sd.name}: no curve")
    lines += ["", "## Model families chosen over training",
              "", "Share of each batch's programs by model family (from metrics.jsonl "
              "`family/*`), averaged over the early, middle and late thirds of training "
              "(first seed). A collapse to fast, weak models shows as `linear` (or `none`) "
              "taking over late, with the mean action time falling.", ""]
    for t in tasks:
        first = next(iter(sorted((out_dir / t).glob("seed*"))), None)
        if first is None:
            continue
        rows = _metrics(first / "rl")
        k = max(1, len(rows) // 3)
        dur = [_tail_mean(rows[:k], "duration_mean_s", 1.0), _tail_mean(rows, "duration_mean_s")]
        lines += [f"### {t}", "", family_table(first / "rl"),
                  f"Mean action time: first third {_fmt(dur[0], 2)} s, last quarter "
                  f"{_fmt(dur[1], 2)} s.", ""]
    abl = out_dir / "ablations"
    if abl.is_dir():
        lines += ["## Ablations", "", ablation_table(abl)]
        for v in ABLATIONS:
            for sd in sorted((abl / v).glob("seed*")) if (abl / v).is_dir() else []:
                png = sd / "run" / "reward_curve.png"
                if png.is_file():
                    lines.append(f"* {v} {sd.name}: ![{v} {sd.name}]({link(png)})")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--mlebench_dir", required=True)
    c.add_argument("--base_ckpt", required=True)
    c.add_argument("--tasks", default="")
    c.add_argument("--paper_dir", default=str(PAPER_DIR))
    for name in ("check", "table1", "ablations", "cpu_demo"):
        s = c if name == "check" else sub.add_parser(name)
        s.add_argument("--out_dir", required=True)
        s.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if a.cmd == "check":
        return cmd_check(a)
    default = {"table1": "table1.md", "ablations": "ablations.md", "cpu_demo": "cpu_demo.md"}
    out = a.out or str(pathlib.Path(a.out_dir) / default[a.cmd])
    try:
        if a.cmd == "table1":
            md = table1(a.out_dir)
        elif a.cmd == "ablations":
            md = "# Ablations\n\n" + ablation_table(a.out_dir)
        else:
            md = cpu_demo(a.out_dir, out)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _write(md, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
