"""Expert trajectories (ML-Agent, "exploration-enriched fine-tuning").

For each task, `n_per_task` action-pool combinations (farthest-point, so diverse) are
rendered into programs and really run in the sandbox with AST instrumentation. Each run is
kept as a step: plan, code, output, score, Δt, status. The steps of a task, in order, form
trajectories of `chain` steps; from them:

* solve examples: task -> (plan, code) of a run that ended "ok" (a valid submission);
* improve examples: a valid run and its output -> a better valid run of the same task;
* instrumentation examples: code -> the `after N: print(...)` lines (`lm_instrument`);
* the states pool for step-wise RL: task + history up to step t.

Examples are stored as fields, not token ids: prompts are rendered later with the
tokenizer's own count (`render_examples`). Everything is cached in `out_dir`, keyed by a
hash of the settings and of the program templates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import pathlib
import random
import time
from typing import Callable, Optional, Sequence

from mle_rl.env import action, tasks
from mle_rl.env.instrument import strip_nonces
from mle_rl.warmstart import action_pool, lm_instrument, programs

STEPS_FILE, STATES_FILE, STATS_FILE = "steps.jsonl", "states.jsonl", "corpus_stats.json"


@dataclasses.dataclass(frozen=True)
class CorpusSettings:
    task_ids: tuple
    n_per_task: int = 20
    chain: int = 3
    seed: int = 0
    timeout_s: Optional[float] = None   # per program; default the task's own limit
    workers: int = 2                    # programs run at once (each sandbox is 1-threaded)

    def key(self) -> str:
        src = b"".join(pathlib.Path(m.__file__).read_bytes() for m in (
            action_pool, programs, lm_instrument)) + pathlib.Path(
            programs.__file__).with_name("programs_span.py").read_bytes()
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode() + src
        return hashlib.sha256(blob).hexdigest()[:16]


def run_steps(settings: CorpusSettings, log: Callable = print, pool=None) -> list[dict]:
    """Renders and executes the programs, `settings.workers` at a time; one dict per run
    (see module docstring), in a fixed order whatever the timing."""
    import concurrent.futures as cf

    jobs = []
    for task_id in settings.task_ids:
        info = programs.TASK_INFO.get(task_id)
        if info is None:
            raise ValueError(f"Task {task_id!r} has no program templates; the warm start knows "
                             f"{', '.join(programs.TASK_INFO)}.")
        task = tasks.get_task(task_id)
        combos = action_pool.choose_combos(info.modality, info.kind, settings.n_per_task,
                                           seed=settings.seed,
                                           exclude=lambda c, i=info: programs.skipped(i, c))
        jobs += [(task, combo) for combo in combos]
    t0 = time.time()
    done = itertools.count(1)      # next() is atomic: safe from the worker threads

    def run(job):
        task, combo = job
        plan, code = programs.render(task.id, combo)
        res = action.run_code(task, code, plan=plan, pool=pool, instrumenter="ast",
                              timeout_s=settings.timeout_s)
        log(f"  corpus {next(done)}/{len(jobs)} {task.id} {combo.key}: {res.status} "
            f"score={res.score if res.score is None else round(res.score, 4)} "
            f"({res.duration_s:.1f} s; {time.time() - t0:.0f} s elapsed)")
        return {"task_id": task.id, "combo": combo.key, "family": combo.model.name,
                "plan": plan, "code": code, "status": res.status,
                "score": res.score, "duration_s": round(res.duration_s, 3),
                "hits": list(res.hits), "output": strip_nonces(res.stdout_tail),
                "error": res.stderr_tail[-1500:] if res.status != "ok" else "",
                "message": res.message}

    with cf.ThreadPoolExecutor(max(1, settings.workers)) as ex:
        return list(ex.map(run, jobs))


def _better(task_id: str, a: float, b: float) -> bool:
    lower = tasks.get_task(task_id).is_lower_better
    return b < a if lower else b > a


def trajectories(steps: Sequence[dict], chain: int) -> list[list[dict]]:
    """Each task's runs in execution order, cut into trajectories of `chain` steps."""
    by_task: dict = {}
    for s in steps:
        by_task.setdefault(s["task_id"], []).append(s)
    out = []
    for runs in by_task.values():
        out += [runs[i:i + chain] for i in range(0, len(runs), chain)]
    return out


def _hist(s: dict) -> dict:
    return {k: s[k] for k in ("plan", "code", "output", "score", "status")}


def states_pool(steps: Sequence[dict], chain: int) -> list[dict]:
    """(task, history up to step t) for every step of every trajectory."""
    pool = []
    for traj in trajectories(steps, chain):
        for t in range(len(traj)):
            pool.append({"task_id": traj[0]["task_id"], "step": t,
                         "history": [_hist(s) for s in traj[:t]]})
    return pool


def examples(steps: Sequence[dict], seed: int = 0) -> dict:
    """{"solve": [...], "improve": [...], "instrument": [...]} as field dicts."""
    rng = random.Random(seed)
    ok = [s for s in steps if s["status"] == "ok"]
    solve = [{"kind": "solve", "task_id": s["task_id"], "plan": s["plan"], "code": s["code"]}
             for s in ok]
    improve = []
    for a in ok:
        better = [b for b in ok if b["task_id"] == a["task_id"] and b is not a
                  and _better(a["task_id"], a["score"], b["score"])]
        if better:
            b = rng.choice(better)
            improve.append({"kind": "improve", "task_id": a["task_id"], "prev": _hist(a),
                            "plan": b["plan"], "code": b["code"]})
    instrument = [{"kind": "instrument", "task_id": s["task_id"], "code": s["code"],
                   "answer": lm_instrument.reference_answer(s["code"])} for s in ok]
    return {"solve": solve, "improve": improve, "instrument": instrument}


def statistics(steps: Sequence[dict], ex: dict) -> dict:
    per_task: dict = {}
    for s in steps:
        d = per_task.setdefault(s["task_id"], {"programs": 0, "ok": 0, "families": set(),
                                               "best": None, "seconds": 0.0})
        d["programs"] += 1
        d["seconds"] += s["duration_s"]
        if s["status"] == "ok":
            d["ok"] += 1
            d["families"].add(s["family"])
            if d["best"] is None or _better(s["task_id"], d["best"], s["score"]):
                d["best"] = s["score"]
    for d in per_task.values():
        d["families"] = sorted(d["families"])
        d["seconds"] = round(d["seconds"], 1)
    statuses: dict = {}
    for s in steps:
        statuses[s["status"]] = statuses.get(s["status"], 0) + 1
    n_ok = sum(d["ok"] for d in per_task.values())
    return {"programs": len(steps), "ok": n_ok,
            "success_rate": round(n_ok / max(len(steps), 1), 3), "statuses": statuses,
            "examples": {k: len(v) for k, v in ex.items()}, "per_task": per_task}


def build(out_dir, settings: CorpusSettings, log: Callable = print, pool=None) -> dict:
    """Runs (or reloads from `out_dir`) the corpus; returns its statistics (+ "cached")."""
    out_dir = pathlib.Path(out_dir)
    key = settings.key()
    stats_file = out_dir / STATS_FILE
    if stats_file.is_file():
        stats = json.loads(stats_file.read_text())
        if stats.get("key") == key and (out_dir / STEPS_FILE).is_file():
            log(f"corpus: reusing {stats['programs']} executed programs from {out_dir}")
            return {**stats, "cached": True}
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    log(f"corpus: running {settings.n_per_task} programs on each of "
        f"{len(settings.task_ids)} tasks in the sandbox")
    steps = run_steps(settings, log=log, pool=pool)
    ex = examples(steps, seed=settings.seed)
    states = states_pool(steps, settings.chain)
    _write_jsonl(out_dir / STEPS_FILE, steps)
    _write_jsonl(out_dir / STATES_FILE, states)
    _write_jsonl(out_dir / "examples.jsonl", [e for v in ex.values() for e in v])
    stats = {"key": key, **statistics(steps, ex), "states": len(states),
             "seconds": round(time.time() - t0, 1)}
    stats_file.write_text(json.dumps(stats, indent=1))
    return {**stats, "cached": False}


def load_examples(out_dir) -> dict:
    ex = {"solve": [], "improve": [], "instrument": []}
    for e in read_jsonl(pathlib.Path(out_dir) / "examples.jsonl"):
        ex[e["kind"]].append(e)
    return ex


def _write_jsonl(path: pathlib.Path, rows) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    tmp.replace(path)


def read_jsonl(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
