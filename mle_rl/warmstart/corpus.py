"""Expert trajectories (ML-Agent, "exploration-enriched fine-tuning").

For each built-in task, `n_per_task` programs, and for each of `generated` procedural
tasks (`env/procedural`: many tables, targets, metrics and wordings), `per_generated`
programs are rendered and really run in the sandbox with AST instrumentation. Tables get
task-generic programs whose decisions are drawn to spread over every value
(`generic.sample_choices`; with the text decisions where the task has a free-text column,
as the text built-in and a share of the procedural tasks do); the image and span built-ins
get action-pool
combinations (farthest-point, so diverse) rendered by their own templates (`programs`). Each run is
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
import functools
import hashlib
import itertools
import json
import pathlib
import random
import time
from typing import Callable, Optional, Sequence

from mle_rl.env import action, tasks
from mle_rl.env.instrument import strip_nonces
from mle_rl.env.procedural import generate as procedural
from mle_rl.warmstart import action_pool, generic, lm_instrument, programs

STEPS_FILE, STATES_FILE, STATS_FILE = "steps.jsonl", "states.jsonl", "corpus_stats.json"


@dataclasses.dataclass(frozen=True)
class CorpusSettings:
    task_ids: tuple
    n_per_task: int = 20
    generated: int = 0                  # procedural tasks added to the corpus
    per_generated: int = 2              # programs per procedural task
    text_share: float = 0.0             # of the procedural tasks, those with a text column
    image_share: float = 0.0            # ... and those of pictures (procedural/image_tasks.py)
    chain: int = 3
    seed: int = 0
    timeout_s: Optional[float] = None   # per program; default the task's own limit
    workers: int = 2                    # programs run at once (each sandbox is 1-threaded)

    def key(self, jobs) -> str:
        """A hash of the settings and of what the corpus runs: every job's task, plan and
        code (so moving template code around keeps the cache, and any change to a program
        does not), and the AST instrumentation rules that shape each run's output."""
        d = hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode())
        for j in jobs:
            d.update(json.dumps([j.task.id, j.plan, j.code]).encode())
        d.update(pathlib.Path(lm_instrument.__file__).read_bytes())
        d.update(pathlib.Path(action.__file__).with_name("instrument.py").read_bytes())
        return d.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Job:
    """One program to run: its task, plan, code, strategy key and model family."""

    task: object
    plan: str
    code: str
    key: str
    family: str


# Built-ins whose programs are the generic ones (a table with a free-text column is a table:
# `generic.py` finds the text by its content, and the pictures by the files), not their own
# templates in `programs.py`.
GENERIC_MODALITIES = ("text", "image")


def _generic_jobs(task, n: int, rng: random.Random) -> list[Job]:
    out = []
    text, images = generic.has_text(task.public_dir), generic.has_images(task.public_dir)
    for c in generic.sample_choices(task.metric, n, rng, exclude=_too_slow(task), text=text,
                                    images=images):
        plan, code = generic.render(c)
        out.append(Job(task, plan, code, c.key, c.family))
    return out


def _too_slow(task):
    """Choices that would not finish within the task's limit on its largest tables (the
    generic programs fit on at most 8000 rows; five folds of 400 trees on that many take
    minutes on one core)."""
    if task.id != "tabular-synth":
        return None
    return lambda c: c.validation == "kfold5" and c.family in (
        "random_forest", "extra_trees") and c.capacity >= 4


def generated_ids(settings: CorpusSettings, log: Callable = print) -> list:
    """The procedural tasks of the corpus (written under the task cache when missing)."""
    if settings.generated <= 0:
        return []
    return procedural.ensure(tasks.generated_dir(), settings.generated, seed=settings.seed,
                             log=log, text_share=settings.text_share,
                             image_share=settings.image_share)


def plan_jobs(settings: CorpusSettings, log: Callable = print) -> list[Job]:
    """Every program of the corpus, in a fixed order."""
    rng = random.Random(settings.seed)
    jobs = []
    for task_id in settings.task_ids:
        task = tasks.get_task(task_id)
        info = programs.TASK_INFO.get(task_id)
        if info is None or info.modality in GENERIC_MODALITIES:
            jobs += _generic_jobs(task, settings.n_per_task, rng)
            continue
        combos = action_pool.choose_combos(info.modality, info.kind, settings.n_per_task,
                                           seed=settings.seed,
                                           exclude=lambda c, i=info: programs.skipped(i, c))
        for combo in combos:
            plan, code = programs.render(task.id, combo)
            jobs.append(Job(task, plan, code, combo.key, combo.model.name))
    for task_id in generated_ids(settings, log):
        jobs += _generic_jobs(tasks.get_task(task_id), settings.per_generated, rng)
    return jobs


def run_steps(settings: CorpusSettings, log: Callable = print, pool=None,
              jobs: Optional[list] = None) -> list[dict]:
    """Renders (or takes `jobs`) and executes the programs, `settings.workers` at a time;
    one dict per run (see module docstring), in a fixed order whatever the timing."""
    import concurrent.futures as cf

    jobs = plan_jobs(settings, log) if jobs is None else jobs
    t0 = time.time()
    done = itertools.count(1)      # next() is atomic: safe from the worker threads

    def run(job: Job):
        res = action.run_code(job.task, job.code, plan=job.plan, pool=pool,
                              instrumenter="ast", timeout_s=settings.timeout_s)
        log(f"  corpus {next(done)}/{len(jobs)} {job.task.id} {job.key}: {res.status} "
            f"score={res.score if res.score is None else round(res.score, 4)} "
            f"({res.duration_s:.1f} s; {time.time() - t0:.0f} s elapsed)")
        return {"task_id": job.task.id, "combo": job.key, "family": job.family,
                "plan": job.plan, "code": job.code, "status": res.status,
                "score": res.score, "duration_s": round(res.duration_s, 3),
                "hits": list(res.hits), "output": strip_nonces(res.stdout_tail),
                "error": res.stderr_tail[-1500:] if res.status != "ok" else "",
                "message": res.message}

    with cf.ThreadPoolExecutor(max(1, settings.workers)) as ex:
        return list(ex.map(run, jobs))


@functools.lru_cache(maxsize=None)
def _lower_is_better(task_id: str) -> bool:
    return tasks.get_task(task_id).is_lower_better


def _better(task_id: str, a: float, b: float) -> bool:
    return b < a if _lower_is_better(task_id) else b > a


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
    jobs = plan_jobs(settings, log)
    key = settings.key(jobs)
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
    steps = run_steps(settings, log=log, pool=pool, jobs=jobs)
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
