"""Prompts for the policy and parsing of its responses.

Two prompts (RL for MLE agents, "self-improvement"): `solve_prompt` asks to solve a task
from scratch; `improve_prompt` shows a previous plan, its code and its terminal output
(with the instrumented train/validation prints) and asks for a better program. Each is
fitted to a token budget: the instructions are never cut; the long parts are (the
description's tail, the data listing's tail, the plan's tail, the code after a statement
boundary, the output's head), longest first.

A response is a short plan in prose, then exactly one ```python fenced block;
`parse_response` splits it into `Parsed(plan, code, status, message)`.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import pathlib
import re
from typing import Callable, Optional

from mle_rl.env import pysource
from mle_rl.env.instrument import strip_nonces

TokenCounter = Callable[[str], int]

ROLE = "You are an expert machine-learning engineer working on a Kaggle-style task."
RULES = """\
# How to answer
- First write a short plan in prose (a few sentences): the model, the features, the validation.
- Then write exactly one ```python code block holding the complete program; no other code blocks.
- The program reads its data from ./input/ (read-only) and must write ./submission.csv in the
  format of ./input/sample_submission.csv (same columns, one row per test id).
- It runs once, in a sandbox with no network and no GPU, under a time and memory limit;
  numpy, pandas and scikit-learn are installed. Prefer fast, robust models.
- Hold out part of the training data, and print the validation metric you measure."""
IMPROVE_RULES = RULES + """
- Improve the previous solution: change what you expect to raise the validation score most,
  fix any error shown in its output, and write the whole new program, not a diff."""


def approx_tokens(text: str) -> int:
    """A cheap upper-bound-ish token count: one token per 3 characters."""
    return math.ceil(len(text) / 3)


# ----------------------------------------------------------------------------- listing


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _head_rows(path: pathlib.Path, n: int, max_chars: int) -> list[str]:
    """The first `n` lines of a text file, each cut to `max_chars` (reads no more)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for _ in range(n):
            row = f.readline(max_chars + 1)
            if not row:
                break
            if not row.endswith("\n"):  # a long line: skip the rest of it
                while (rest := f.readline(1 << 16)) and not rest.endswith("\n"):
                    pass
            row = row.rstrip("\n")
            out.append(row[:max_chars] + (" ..." if len(row) > max_chars else ""))
    return out


def data_listing(public_dir: pathlib.Path, *, max_files: int = 40, head_rows: int = 3,
                 max_line_chars: int = 200, per_dir: int = 10) -> str:
    """The files under `public_dir` (as `input/...`) with sizes; CSVs also show their
    header and first `head_rows` rows, each line cut to `max_line_chars`. A folder with
    more than `per_dir` files (e.g. images) is summarized: count, total size, 3 names."""
    public_dir = pathlib.Path(public_dir)
    by_dir: dict = {}
    for p in sorted(public_dir.rglob("*")):
        if p.is_file():
            by_dir.setdefault(p.parent, []).append(p)
    lines, shown = [], 0
    for folder, files in sorted(by_dir.items()):
        if len(files) > per_dir:
            rel = folder.relative_to(public_dir).as_posix()
            total = sum(f.stat().st_size for f in files)
            names = ", ".join(f.name for f in files[:3])
            lines.append(f"input/{rel}/ ({len(files)} files, {_size(total)}; e.g. {names})")
            continue
        for p in files:
            if shown >= max_files:
                break
            shown += 1
            rel = p.relative_to(public_dir).as_posix()
            lines.append(f"input/{rel} ({_size(p.stat().st_size)})")
            if p.suffix.lower() in (".csv", ".tsv"):
                lines += [f"    {r}" for r in _head_rows(p, head_rows + 1, max_line_chars)]
    n_files = sum(len(f) for f in by_dir.values() if len(f) <= per_dir)
    if n_files > shown:
        lines.append(f"... and {n_files - shown} more files")
    return "\n".join(lines) if lines else "(no files)"


# ----------------------------------------------------------------------------- cutting


def cut_tail(text: str, n: int, what: str) -> str:
    """Keeps the first `n` characters (on a line boundary when possible)."""
    if len(text) <= n:
        return text
    head = text[:n]
    if "\n" in head:
        head = head[: head.rindex("\n")]
    return head + f"\n[... rest of the {what} cut ...]"


def cut_head(text: str, n: int, what: str) -> str:
    """Keeps the last `n` characters (on a line boundary when possible)."""
    if len(text) <= n:
        return text
    tail = text[len(text) - n:]
    if "\n" in tail:
        tail = tail[tail.index("\n") + 1:]
    return f"[... start of the {what} cut ...]\n" + tail


def cut_code(code: str, n: int) -> str:
    """Keeps whole top-level statements from the start while they fit in `n` characters;
    falls back to whole lines if the code does not parse."""
    if len(code) <= n:
        return code
    lines = code.splitlines(keepends=True)
    try:
        ends = [s.end_lineno for s in pysource.parse(code).body]
    except (SyntaxError, ValueError):
        ends = list(range(1, len(lines) + 1))
    keep = 0
    for end in ends:
        if len("".join(lines[:end])) > n:
            break
        keep = end
    rest = len(lines) - keep
    return "".join(lines[:keep]) + f"# ... ({rest} more lines not shown)\n"


def _fit(build: Callable[[int], str], max_tokens: int, count: TokenCounter, longest: int) -> str:
    """Largest per-part character cap C such that count(build(C)) <= max_tokens."""
    full = build(longest)
    if count(full) <= max_tokens:
        return full
    lo, hi = 0, longest
    if count(build(0)) > max_tokens:
        raise ValueError(f"A token budget of {max_tokens} is too small for the prompt's "
                         "instructions; raise max_tokens.")
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(build(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return build(lo)


# ----------------------------------------------------------------------------- prompts


def _limits_line(task) -> str:
    return (f"Limits for this task: {task.timeout_s:g} s wall time, {task.memory_mb} MB memory. "
            f"Metric: {task.metric} ({'lower' if task.is_lower_better else 'higher'} is better).")


def solve_prompt(task, *, max_tokens: int, count_tokens: Optional[TokenCounter] = None) -> str:
    """The solve-from-scratch prompt for `task`, at most `max_tokens` tokens."""
    count = count_tokens or approx_tokens
    desc, listing = task.description.strip(), data_listing(task.public_dir)

    def build(cap: int) -> str:
        return (f"{ROLE}\n\n# Task\n{cut_tail(desc, cap, 'description')}\n\n"
                f"# Data\n{cut_tail(listing, cap, 'listing')}\n\n{_limits_line(task)}\n\n{RULES}\n")

    return _fit(build, max_tokens, count, max(len(desc), len(listing)))


def improve_prompt(task, prev_plan: str, prev_code: str, prev_output: str, *, max_tokens: int,
                   count_tokens: Optional[TokenCounter] = None) -> str:
    """The improve prompt: the task, then the previous plan, code and terminal output
    (instrument nonces replaced by plain step tags), at most `max_tokens` tokens."""
    count = count_tokens or approx_tokens
    desc, listing = task.description.strip(), data_listing(task.public_dir)
    plan, code = prev_plan.strip(), prev_code.rstrip() + "\n"
    output = strip_nonces(prev_output).strip() or "(no output)"

    def build(cap: int) -> str:
        return (f"{ROLE}\n\n# Task\n{cut_tail(desc, cap, 'description')}\n\n"
                f"# Data\n{cut_tail(listing, cap, 'listing')}\n\n{_limits_line(task)}\n\n"
                f"# Previous solution\nPlan: {cut_tail(plan, cap, 'plan')}\n\n"
                f"```python\n{cut_code(code, cap)}```\n\n"
                f"# Its terminal output\n```\n{cut_head(output, cap, 'output')}\n```\n\n"
                f"{IMPROVE_RULES}\n")

    return _fit(build, max_tokens, count, max(len(desc), len(listing), len(plan), len(code),
                                              len(output)))


# ----------------------------------------------------------------------------- parsing


@dataclasses.dataclass(frozen=True)
class Parsed:
    """plan: prose before the first fence; code: the python block ("" if none);
    status: "ok" | "no_code" | "ambiguous" | "syntax_error"; message: why, for a person."""

    plan: str
    code: str
    status: str
    message: str = ""


_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)",
                    re.M | re.S)
_PY_TAGS = ("python", "py", "python3", "")


def parse_response(text: str) -> Parsed:
    """Splits a response into plan and code. An unclosed last fence (a response cut at the
    token limit) still counts as a block; its code is then checked for syntax."""
    blocks = [(m.group(1).lower(), m.group(2), m.start()) for m in _FENCE.finditer(text)]
    first = blocks[0][2] if blocks else len(text)
    plan = text[:first].strip()
    py = [b for b in blocks if b[0] in _PY_TAGS[:3]]
    if not py:
        py = [b for b in blocks if b[0] == ""]
    if not py:
        return Parsed(plan, "", "no_code", "The response has no ```python code block.")
    if len(py) > 1:
        return Parsed(plan, "", "ambiguous",
                      f"The response has {len(py)} python code blocks; exactly one is expected.")
    code = py[0][1]
    if not code.strip():
        return Parsed(plan, "", "no_code", "The response's python code block is empty.")
    try:
        pysource.check_compiles(code)
    except (SyntaxError, ValueError) as e:
        where = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
        return Parsed(plan, code, "syntax_error",
                      f"The code does not parse{where}: {getattr(e, 'msg', e)}.")
    return Parsed(plan, code, "ok")


__all__ = ["solve_prompt", "improve_prompt", "data_listing", "parse_response", "Parsed",
           "approx_tokens", "cut_code", "cut_head", "cut_tail"]
