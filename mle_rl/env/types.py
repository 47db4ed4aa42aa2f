"""Plain data types shared across the environment: a task and the result of one action.

No JAX here (DESIGN.md: `env/` knows nothing of JAX). An action is text in, an
`ActionResult` out.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable, Optional

import pandas as pd

# grade(submission_df, answers_df) -> float; raises InvalidSubmission on a bad submission.
Grader = Callable[[pd.DataFrame, pd.DataFrame], float]

# Every status an action can end in.
STATUSES = (
    "ok",                  # ran, wrote a valid submission, graded
    "error",               # non-zero exit / exception
    "timeout",             # wall-time or CPU-time limit
    "oom",                 # memory limit
    "invalid_submission",  # ran, but submission.csv missing or rejected by the grader
    "no_code",             # response had no fenced python block
    "bad_format",          # ambiguous blocks or a syntax error in the code
)


class InvalidSubmission(ValueError):
    """A submission the grader rejects; the message says why, for a person."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One MLE task in the MLE-bench layout.

    `root` holds `description.md`, `public/` (what the agent's program may read) and
    `private/` (answers, never visible in the sandbox).
    """

    id: str
    root: pathlib.Path
    metric: str                   # e.g. "auc", "multiclass_log_loss"
    is_lower_better: bool
    grader: Grader
    modality: str = "tabular"     # tabular | text | image
    answers_file: str = "answers.csv"  # inside private/
    timeout_s: float = 120.0      # default wall-time limit for one program
    memory_mb: int = 4096         # default memory limit for one program
    reward_scale: float = 1.0     # ML-Agent's per-task alpha
    source: str = "builtin"       # builtin | mlebench | user
    description_path: Optional[pathlib.Path] = None   # default: root/description.md

    @property
    def public_dir(self) -> pathlib.Path:
        return self.root / "public"

    @property
    def private_dir(self) -> pathlib.Path:
        return self.root / "private"

    @property
    def description(self) -> str:
        path = self.description_path or self.root / "description.md"
        if not path.is_file():
            return (f"# {self.id}\n\nNo description.md was found for this task. The files "
                    "are under `./input/`; write `./submission.csv`.\n")
        return path.read_text(encoding="utf-8", errors="replace")


@dataclasses.dataclass(frozen=True)
class ActionResult:
    """What one action did: status, score, reward and how long the program ran (Δt)."""

    status: str
    score: Optional[float]
    reward: float
    duration_s: float
    hits: tuple = ()              # names of the instrumentation prints that matched
    stdout_tail: str = ""
    stderr_tail: str = ""
    plan: str = ""
    code: str = ""
    message: str = ""             # one sentence for a person: why it failed, if it did
    instrumented_by: str = ""     # "lm" | "lm_fallback" (the LM's answer was refused) | ""

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "score": self.score,
            "reward": self.reward,
            "duration_s": self.duration_s,
            "hits": list(self.hits),
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "message": self.message,
            "instrumented_by": self.instrumented_by,
        }
