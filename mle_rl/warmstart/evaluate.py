"""Measures a warm-start policy: per task, N samples of the solve prompt at a temperature,
each parsed and run in the sandbox; the valid fraction and the model families named in
the code. The valid programs are instrumented by the frozen policy (`LMInstrumenter`,
answers generated in one batch, greedy) and run again to count matched prints.
"""

from __future__ import annotations

import json
import pathlib
import re
import time
from typing import Callable, Optional, Sequence

from mle_rl.env import action, prompts, tasks
from mle_rl.warmstart import lm_instrument
from mle_rl.warmstart.frozen import generate_texts, load_tokenizer

FAMILY_PATTERNS = {
    "linear": r"\b(LogisticRegression|Ridge|Lasso|LinearRegression|SGD\w+)\(",
    "knn": r"\bKNeighbors\w+\(",
    "naive_bayes": r"\b(GaussianNB|MultinomialNB|ComplementNB|BernoulliNB)\(",
    "svm": r"\b(SVC|SVR|LinearSVC|LinearSVR)\(",
    "random_forest": r"\bRandomForest\w+\(",
    "extra_trees": r"\bExtraTrees\w+\(",
    "hist_gb": r"\bHistGradientBoosting\w+\(",
    "mlp": r"\bMLP\w+\(",
}


def family_of(code: str) -> str:
    """The family a program declares (`# model family: <name>`, as the task-generic
    programs do), else that of the first model constructed after `model =`, else of any
    model."""
    declared = re.findall(r"^# model family: (\w+)$", code, re.M)
    if len(declared) == 1:
        return declared[0]
    m = re.search(r"^model = (.*)$", code, re.M)
    for text in ((m.group(1),) if m else ()) + (code,):
        for fam, pat in FAMILY_PATTERNS.items():
            if re.search(pat, text):
                return fam
    return "other"


def evaluate_task(model, tok, task_id: str, *, n: int, temperature: float, seed: int,
                  solve_tokens: int, max_new_tokens: int, pool=None,
                  log: Callable = print) -> dict:
    task = tasks.get_task(task_id)
    count = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
    prompt = prompts.solve_prompt(task, max_tokens=solve_tokens, count_tokens=count)
    t0 = time.time()
    texts = generate_texts(model, tok, [prompt] * n, max_new_tokens=max_new_tokens,
                           temperature=temperature, seed=seed)
    t_gen = time.time() - t0
    parsed = [prompts.parse_response(t) for t in texts]
    codes = [p.code for p in parsed if p.status == "ok"]
    answers = generate_texts(model, tok, [lm_instrument.instrument_prompt(c) for c in codes],
                             max_new_tokens=192, temperature=0.0, seed=seed) if codes else []
    lookup = dict(zip([lm_instrument.instrument_prompt(c) for c in codes], answers))
    lm = lm_instrument.LMInstrumenter(lambda p: lookup.get(p, ""))
    statuses, families, hits, scores, lm_hits = [], [], [], [], []
    for p in parsed:
        if p.status != "ok":
            statuses.append("no_code" if p.status == "no_code" else "bad_format")
            continue
        accepted_before = lm.accepted
        res = action.run_code(task, p.code, plan=p.plan, instrumenter=lm, pool=pool)
        statuses.append(res.status)
        if res.status == "ok":
            families.append(family_of(p.code))
            hits.append(len(res.hits))
            scores.append(res.score)
            if lm.accepted > accepted_before:
                lm_hits.append(len(res.hits))
    valid = statuses.count("ok")
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    fams = sorted(set(families))
    out = {"task": task_id, "samples": n, "valid": valid, "valid_frac": valid / n,
           "statuses": counts, "families": fams, "n_families": len(fams),
           "best_score": (min(scores) if task.is_lower_better else max(scores)) if scores
           else None, "hits_ge3": sum(h >= 3 for h in hits), "valid_with_hits": len(hits),
           "lm_accepted_valid": len(lm_hits), "lm_hits_ge3": sum(h >= 3 for h in lm_hits),
           "family_counts": {f: families.count(f) for f in fams},
           "lm_instrumenter": lm.stats(), "generate_s": round(t_gen, 1),
           "seconds": round(time.time() - t0, 1), "example": texts[0][:1500]}
    log(f"  {task_id}: {valid}/{n} valid, {len(fams)} families {fams}, "
        f">=3 prints on {out['hits_ge3']}/{len(hits)} ({out['lm_hits_ge3']}/{len(lm_hits)} "
        f"with the LM's own prints), LM instrumenter {lm.stats()} "
        f"({out['seconds']:.0f} s)")
    return out


def evaluate(policy_dir, task_ids: Sequence[str], *, n: int = 32, temperature: float = 0.7,
             seed: int = 0, solve_tokens: Optional[int] = None, max_new_tokens: int = 512,
             log: Callable = print) -> list[dict]:
    """solve_tokens: the solve-prompt budget (default: the one the policy was tuned with)."""
    from mle_rl.env.warm_pool import WarmPool
    from mle_rl.models import hf

    if solve_tokens is None:
        meta = json.loads((pathlib.Path(policy_dir) / "warmstart.json").read_text())
        solve_tokens = meta["settings"]["budgets"]["solve_prompt"]

    model = hf.load(policy_dir)
    tok = load_tokenizer(policy_dir)
    out = []
    with WarmPool(size=1) as pool:
        for tid in task_ids:
            out.append(evaluate_task(model, tok, tid, n=n, temperature=temperature, seed=seed,
                                     solve_tokens=solve_tokens, max_new_tokens=max_new_tokens,
                                     pool=pool, log=log))
    return out


def evaluate_instrumenter(policy_dir, steps: Sequence[dict], *, seed: int = 0,
                          log: Callable = print) -> dict:
    """The frozen policy as instrumenter on given valid programs (corpus steps: task_id,
    code): answers generated greedily in one batch, each program run with them. Returns
    {"programs", "accepted", "fallbacks", "hits_ge3", "hits_ge3_accepted", "hits"}."""
    from mle_rl.env.warm_pool import WarmPool
    from mle_rl.models import hf

    model, tok = hf.load(policy_dir), load_tokenizer(policy_dir)
    prompts_ = [lm_instrument.instrument_prompt(s["code"]) for s in steps]
    answers = generate_texts(model, tok, prompts_, max_new_tokens=192, temperature=0.0,
                             seed=seed)
    lm = lm_instrument.LMInstrumenter(dict(zip(prompts_, answers)).get)
    hits, accepted_hits = [], []
    with WarmPool(size=1) as pool:
        for s in steps:
            before = lm.accepted
            res = action.run_code(tasks.get_task(s["task_id"]), s["code"], instrumenter=lm,
                                  pool=pool)
            hits.append(len(res.hits))
            if lm.accepted > before:
                accepted_hits.append(len(res.hits))
    out = {"programs": len(steps), **lm.stats(), "hits_ge3": sum(h >= 3 for h in hits),
           "hits_ge3_accepted": sum(h >= 3 for h in accepted_hits), "hits": hits}
    log(f"  LM instrumenter on {len(steps)} valid programs: accepted {lm.accepted}, "
        f"fallbacks {lm.fallbacks}; >=3 prints on {out['hits_ge3']} "
        f"({out['hits_ge3_accepted']} of them with the LM's own prints)")
    return out
