"""Where the trainer's prompts come from, and the per-task archive of valid solutions.

* `Archive`: per task, the best `size` valid solutions (plan, code, terminal output with
  the instrumented metrics, score), for the paper's self-improvement prompts.
* `TaskPromptSource`: solve-from-scratch, or with probability `self_improve` (when the
  task has an archived solution) improve-a-previous-solution.
* Any object with `sample(rng) -> Prompt` plugs in: `ExpertPrompts` wraps the warm start's
  expert states for ML-Agent's step-wise RL; `MixedSource` mixes two sources.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Protocol

import numpy as np

from mle_rl.env import prompts as env_prompts
from mle_rl.env.types import Task


@dataclasses.dataclass(frozen=True)
class Prompt:
    task_id: str
    text: str
    kind: str                      # solve | improve | expert
    prev_score: Optional[float] = None
    prev_code: Optional[str] = None


class PromptSource(Protocol):
    def sample(self, rng: np.random.Generator) -> Prompt: ...


def signed(score: float, is_lower_better: bool) -> float:
    """Higher is better, whatever the metric's direction."""
    return -score if is_lower_better else score


class Archive:
    """Per task, the top-`size` valid solutions by (direction-aware) score."""

    def __init__(self, size: int = 8):
        self.size = size
        self.entries: dict[str, list] = {}

    def add(self, task: Task, *, plan: str, code: str, output: str, score: float) -> None:
        items = self.entries.setdefault(task.id, [])
        if any(e["code"] == code for e in items):
            return
        items.append({"plan": plan, "code": code, "output": output, "score": float(score)})
        items.sort(key=lambda e: signed(e["score"], task.is_lower_better), reverse=True)
        del items[self.size:]

    def best(self, task_id: str) -> Optional[dict]:
        items = self.entries.get(task_id)
        return items[0] if items else None

    def sample(self, task_id: str, rng: np.random.Generator) -> Optional[dict]:
        items = self.entries.get(task_id)
        if not items:
            return None
        return items[int(rng.integers(len(items)))]

    def state_dict(self) -> dict:
        return {"size": self.size, "entries": self.entries}

    def load_state_dict(self, d: dict) -> None:
        self.size = int(d["size"])
        self.entries = {k: [dict(e) for e in v] for k, v in d["entries"].items()}


class TaskPromptSource:
    """Solve prompts, and improve prompts built from the archive (fraction `self_improve`),
    fitted to `max_tokens`, or to `improve_tokens` for improve prompts when given."""

    def __init__(self, tasks: dict, archive: Archive, *, self_improve: float, max_tokens: int,
                 count_tokens: Callable[[str], int], improve_tokens: Optional[int] = None):
        self.tasks, self.archive = tasks, archive
        self.self_improve = self_improve
        self.max_tokens, self.count_tokens = max_tokens, count_tokens
        self.improve_tokens = improve_tokens or max_tokens
        self._solve_cache: dict = {}

    def sample(self, rng: np.random.Generator) -> Prompt:
        task_id = list(self.tasks)[int(rng.integers(len(self.tasks)))]
        task = self.tasks[task_id]
        prev = self.archive.sample(task_id, rng) if rng.random() < self.self_improve else None
        if prev is None:
            if task_id not in self._solve_cache:
                self._solve_cache[task_id] = env_prompts.solve_prompt(
                    task, max_tokens=self.max_tokens, count_tokens=self.count_tokens)
            return Prompt(task_id, self._solve_cache[task_id], "solve")
        text = env_prompts.improve_prompt(task, prev["plan"], prev["code"], prev["output"],
                                          max_tokens=self.improve_tokens,
                                          count_tokens=self.count_tokens)
        return Prompt(task_id, text, "improve", prev_score=prev["score"], prev_code=prev["code"])


class ExpertPrompts:
    """ML-Agent's step-wise RL: prompts from states of expert trajectories (task + history
    up to step t), drawn from the warm start's states pool (`warmstart/states.py`)."""

    def __init__(self, source):
        self.source = source

    def sample(self, rng) -> Prompt:
        task_id, text, meta = self.source.sample(rng)
        return Prompt(task_id, text, "expert", prev_score=meta.get("prev_score"),
                      prev_code=meta.get("prev_code"))


class MixedSource:
    """Draws from `a` with probability `1 - frac_b`, else from `b`."""

    def __init__(self, a: PromptSource, b: PromptSource, frac_b: float):
        self.a, self.b, self.frac_b = a, b, frac_b

    def sample(self, rng: np.random.Generator) -> Prompt:
        return (self.b if rng.random() < self.frac_b else self.a).sample(rng)


def draw_prompts(source: PromptSource, rng: np.random.Generator, n: int, group_size: int,
                 counters) -> tuple[list, list]:
    """`n` prompts for one round of sampling, in whole groups: each prompt drawn once and
    repeated `group_size` times, with a fresh group id (from `counters["next_group_id"]`);
    with `group_size` 1, `n` independent prompts and no group ids (None)."""
    if group_size == 1:
        return [source.sample(rng) for _ in range(n)], [None] * n
    prompts, groups = [], []
    for _ in range(n // group_size):
        p, gid = source.sample(rng), counters["next_group_id"]
        counters["next_group_id"] += 1
        prompts += [p] * group_size
        groups += [gid] * group_size
    return prompts, groups
