"""Step-wise RL prompts (ML-Agent): states sampled from the expert trajectories.

A state is a task plus the expert's history up to step t. Step 0 is the solve prompt; a
later step is the improve prompt built from the last valid step of the history (or the
last step, if none was valid), so the policy acts once from a state it did not have to
reach itself.

    src = ExpertStatesSource(policy_dir)        # reads policy_dir/states.jsonl
    task_id, prompt, meta = src.sample(rng)     # rng: random.Random or np.random.Generator
    mixed = MixedSource([(src, 0.5), (own_source, 0.5)])
"""

from __future__ import annotations

import json
import pathlib
from typing import Optional, Sequence

from mle_rl.env import prompts, tasks
from mle_rl.warmstart.pipeline import WARMSTART_FORMAT

STATES_FILE = "states.jsonl"


def _randrange(rng, n: int) -> int:
    if hasattr(rng, "integers"):
        return int(rng.integers(n))
    return rng.randrange(n)


def _uniform(rng) -> float:
    return float(rng.random())


class WarmStartRecordError(ValueError):
    """A policy's warmstart.json that this version cannot read (one line for a person)."""


def trained_prompt_budgets(path: Optional[pathlib.Path]) -> Optional[dict]:
    """{"solve": N, "improve": M}: the prompt lengths (tokens) a warm-start policy was
    fine-tuned on (its `warmstart.json`), or None for a checkpoint without one. A small
    policy reads longer prompts badly (positions it never saw), so callers fit prompts to
    min(their budget, these). A warmstart.json that is not JSON, or of another layout
    (`format` other than WARMSTART_FORMAT, or without the budgets), raises
    `WarmStartRecordError`: its policy would be prompted at lengths it was not trained on."""
    marker = pathlib.Path(path) / "warmstart.json" if path is not None else None
    if marker is None or not marker.is_file():
        return None
    fix = ("rebuild the policy with experiments/warm_start.py, or delete the file if this "
           "policy is not from the warm start")
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise WarmStartRecordError(f"{marker}: not readable as JSON ({e}); {fix}.") from None
    fmt = record.get("format", WARMSTART_FORMAT) if isinstance(record, dict) else None
    try:
        if fmt != WARMSTART_FORMAT:
            raise ValueError(f"format {fmt!r}, this version reads {WARMSTART_FORMAT}")
        budgets = record["settings"]["budgets"]
        return {"solve": int(budgets["solve_prompt"]), "improve": int(budgets["improve_prompt"])}
    except (ValueError, KeyError, TypeError) as e:
        what = e if isinstance(e, ValueError) else f"no settings.budgets ({e!r})"
        raise WarmStartRecordError(f"{marker}: written by another version of the warm start "
                                   f"({what}); {fix}.") from None


def _budgets(path: pathlib.Path, solve, improve) -> tuple[int, int]:
    """Explicit budgets, else those the policy was fine-tuned with (its warmstart.json),
    else the paper's 1024 input tokens."""
    saved = trained_prompt_budgets(path) or {}
    return solve or saved.get("solve", 1024), improve or saved.get("improve", 1024)


class ExpertStatesSource:
    """Samples (task_id, prompt_text, meta) from a states pool.

    path: a policy or corpus directory holding `states.jsonl`, or the file itself.
    task_ids: keep only these tasks (e.g. the training tasks when others are held out).
    count_tokens: the policy's token counter for the prompt budgets (default: the
    tokenizer saved in `path` when there is one, else `prompts.approx_tokens`).
    solve_tokens / improve_tokens: prompt budgets (default: the policy's warmstart.json,
    else 1024).
    meta: {"source": "expert_states", "step": t, "kind": "solve"|"improve", and for
    improve "prev_plan", "prev_code", "prev_score" (None if the step was not valid)}.
    """

    name = "expert_states"

    def __init__(self, path, *, task_ids: Optional[Sequence[str]] = None, count_tokens=None,
                 solve_tokens: Optional[int] = None, improve_tokens: Optional[int] = None,
                 mlebench_dir=None, task_dir=None,
                 cache_dir=None):
        path = pathlib.Path(path)
        file = path / STATES_FILE if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"No states pool at {file}; build the warm-start policy "
                                    "first (experiments/warm_start.py) or pass its directory.")
        with open(file) as f:
            states = [json.loads(line) for line in f if line.strip()]
        if task_ids is not None:
            keep = set(task_ids)
            states = [s for s in states if s["task_id"] in keep]
        if not states:
            raise ValueError(f"The states pool {file} has no state for tasks "
                             f"{list(task_ids) if task_ids is not None else 'any'}.")
        self.states = states
        if count_tokens is None and path.is_dir() and (path / "tokenizer.json").is_file():
            from mle_rl.warmstart.frozen import load_tokenizer
            tok = load_tokenizer(path)
            count_tokens = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
        self._count = count_tokens or prompts.approx_tokens
        self._budgets = _budgets(path, solve_tokens, improve_tokens)
        self._task_kw = {"mlebench_dir": mlebench_dir, "cache_dir": cache_dir,
                         "task_dir": task_dir}
        self._tasks: dict = {}

    def __len__(self) -> int:
        return len(self.states)

    def _task(self, task_id: str):
        if task_id not in self._tasks:
            self._tasks[task_id] = tasks.get_task(task_id, **self._task_kw)
        return self._tasks[task_id]

    def prompt_for(self, state: dict) -> tuple[str, dict]:
        task = self._task(state["task_id"])
        hist = state["history"]
        meta = {"source": self.name, "step": state["step"]}
        if not hist:
            return (prompts.solve_prompt(task, max_tokens=self._budgets[0],
                                         count_tokens=self._count), {**meta, "kind": "solve"})
        valid = [h for h in hist if h["status"] == "ok"]
        prev = valid[-1] if valid else hist[-1]
        text = prompts.improve_prompt(task, prev["plan"], prev["code"], prev["output"],
                                      max_tokens=self._budgets[1], count_tokens=self._count)
        return text, {**meta, "kind": "improve", "prev_plan": prev["plan"],
                      "prev_code": prev["code"], "prev_score": prev["score"]}

    def sample(self, rng) -> tuple[str, str, dict]:
        state = self.states[_randrange(rng, len(self.states))]
        text, meta = self.prompt_for(state)
        return state["task_id"], text, meta


class MixedSource:
    """Picks one of several prompt sources by weight, then samples from it."""

    def __init__(self, sources: Sequence[tuple[object, float]]):
        total = sum(w for _, w in sources)
        if not sources or total <= 0 or any(w < 0 for _, w in sources):
            raise ValueError("MixedSource needs at least one source and non-negative weights "
                             "with a positive sum.")
        self.sources = [(s, w / total) for s, w in sources]

    def sample(self, rng):
        u, acc = _uniform(rng), 0.0
        for src, w in self.sources:
            acc += w
            if u < acc:
                return src.sample(rng)
        return self.sources[-1][0].sample(rng)
