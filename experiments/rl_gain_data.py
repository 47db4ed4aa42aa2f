"""What `launch/rl_gain.sh` left on disk, per task: the evaluations and RL runs of each seed,
the extra SFT pool, and which SFT policy each seed started from.

Per task directory OUT/<task>/: seed<k>/{sft,rl_eval,greedy}.json (evaluate.py),
seed<k>/rl/{summary.json,metrics.jsonl} (run.py) and sft_pool*.json. `keep_files` copies
them beside a report. The SFT samples of one policy pool (every seed's and the pool's); a
policy is named by the fingerprint evaluate.py records, and two builds of the same source
on two machines can be two policies (README), so samples of different fingerprints do not.
`experiments/rl_gain_report.py` renders what this reads.
"""

from __future__ import annotations

import math
import pathlib
import shutil
import sys
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import report as base  # noqa: E402
from mle_rl.agent import best_at_k as bak  # noqa: E402

KEEP = ("sft.json", "rl_eval.json", "greedy.json", "rl/summary.json", "rl/metrics.jsonl")


def keep_files(out_dir: pathlib.Path, md: pathlib.Path) -> pathlib.Path:
    """Copies the small result files beside the report; returns the copy's root."""
    dest = md.with_name(md.stem + "_files")
    if dest.resolve() == out_dir.resolve():
        return dest
    for f in [out_dir / "rl_gain.json", *out_dir.glob("*/sft_pool*.json")] + [
            d / k for d in out_dir.glob("*/seed*") for k in KEEP]:
        if f.is_file():
            to = dest / f.relative_to(out_dir)
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, to)
    return dest


def mean_std(xs: list) -> tuple:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def solve_scores(ev: Optional[dict]) -> list:
    if not ev:
        return []
    return [s for s, m in zip(ev.get("scores", []), ev.get("modes", [])) if m == "solve"]


def pooled_solve_scores(evs) -> list:
    """The solve samples of several evaluations (missing ones: none), in order."""
    return [x for e in evs for x in solve_scores(e)]


def fingerprint(ev: Optional[dict]) -> Optional[str]:
    """The fingerprint of the policy an evaluation sampled (evaluate.py records it)."""
    return ((ev or {}).get("policy") or {}).get("fingerprint")


# Files evaluate.py wrote before it recorded `sampling` were sampled at its default then, 0.7.
# A fact about those files: it stays 0.7 whatever evaluate.py's default becomes.
UNRECORDED_TEMPERATURE = 0.7


class Task:
    """Everything on disk for one task."""

    def __init__(self, tdir: pathlib.Path):
        self.id, self.dir = tdir.name, tdir
        self.seeds = sorted(int(p.name[4:]) for p in tdir.glob("seed*") if p.name[4:].isdigit())
        ev = lambda s, name: base._eval(tdir / f"seed{s}" / name, self.id)   # noqa: E731
        self.sft = {s: ev(s, "sft") for s in self.seeds}
        self.rl = {s: ev(s, "rl_eval") for s in self.seeds}
        self.greedy = {s: ev(s, "greedy") for s in self.seeds}
        self.summary = {s: base._json(tdir / f"seed{s}" / "rl" / "summary.json")
                        for s in self.seeds}
        self.metrics = {s: base._metrics(tdir / f"seed{s}" / "rl") for s in self.seeds}
        # the extra SFT pool: sft_pool.json, and the top-ups rl_gain.sh adds (sft_pool_<seed>)
        self.pools = [base._eval(f.with_suffix(""), self.id)
                      for f in sorted(tdir.glob("sft_pool*.json"))]
        # each seed's SFT policy, and every policy among the SFT samples (None: a file from
        # before evaluate.py recorded one)
        self.policy = {s: fingerprint(e) for s, e in self.sft.items() if e}
        self.policies = sorted({fp for e in [*self.sft.values(), *self.pools]
                                if (fp := fingerprint(e))})
        # every SFT solve sample, the seeds' and the pools', when they are of one policy
        self.sft_all = (pooled_solve_scores([*self.sft.values(), *self.pools])
                        if len(self.policies) <= 1 else [])
        any_ev = next((e for e in [*self.sft.values(), *self.rl.values()] if e), None)
        self.metric = any_ev["metric"] if any_ev else "?"
        self.lower = bool(any_ev["is_lower_better"]) if any_ev else False
        self.baseline = any_ev.get("sample_submission_score") if any_ev else None
        everything = pooled_solve_scores([*self.sft.values(), *self.rl.values(), *self.pools])
        self.floor = bak.floor_of(everything, self.baseline, self.lower)

    def temperatures(self, which: str) -> set:
        """The sampling temperatures of the SFT ("sft") or RL ("rl") evaluations on disk
        (files without a recorded one: ``UNRECORDED_TEMPERATURE``)."""
        evs = self.sft if which == "sft" else self.rl
        return {float((e.get("sampling") or {}).get("temperature", UNRECORDED_TEMPERATURE))
                for e in evs.values() if e}

    def curve(self, scores: list, ks) -> dict:
        if self.floor is None:
            return {}
        return bak.best_at_k(scores, ks, is_lower_better=self.lower, floor=self.floor)

    def sft_samples_of(self, seed: int) -> list:
        """Every SFT solve sample of the policy that `seed` started from (all of them when
        the task's SFT samples are of one policy)."""
        if len(self.policies) <= 1:
            return self.sft_all
        fp = self.policy.get(seed)
        return pooled_solve_scores(e for e in [*self.sft.values(), *self.pools]
                                   if e and fingerprint(e) == fp)

    def ks(self) -> list:
        n = min([len(solve_scores(e)) for e in [*self.sft.values(), *self.rl.values()] if e] or [0])
        return bak.powers_of_two(n)

    def better(self, a, b) -> bool:
        return a < b if self.lower else a > b

