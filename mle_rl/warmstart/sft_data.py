"""Corpus examples -> (prompt, response) texts -> token ids -> length-bucketed batches.

Prompts are exactly what the environment asks (`prompts.solve_prompt` / `improve_prompt`,
fitted to a token budget with the policy's own tokenizer; `lm_instrument.instrument_prompt`),
wrapped as one chat turn. A response is `plan`, a blank line, one ```python block, then the
end-of-turn token.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

import numpy as np

from mle_rl.env import prompts, tasks
from mle_rl.warmstart import lm_instrument
from mle_rl.warmstart.tokenizer import user_turn


@dataclasses.dataclass(frozen=True)
class Budgets:
    """Token budgets: prompts are fitted to these; longer responses are dropped."""

    solve_prompt: int = 128
    improve_prompt: int = 512
    response: int = 512
    instrument_prompt: int = 640
    sequence: int = 640           # prompt + response; the largest SFT bucket


def response_text(plan: str, code: str) -> str:
    return f"{plan}\n\n```python\n{code.rstrip()}\n```"


def texts(ex: dict, tokenizer, budgets: Budgets) -> list[tuple[str, str, str]]:
    """(kind, prompt text, response text) for every example of every kind."""
    count = lambda s: len(tokenizer(s, add_special_tokens=False)["input_ids"])
    cache: dict = {}

    def task(tid):
        if tid not in cache:
            cache[tid] = tasks.get_task(tid)
        return cache[tid]

    out = []
    solve_prompts: dict = {}
    for e in ex.get("solve", ()):
        if e["task_id"] not in solve_prompts:
            solve_prompts[e["task_id"]] = prompts.solve_prompt(
                task(e["task_id"]), max_tokens=budgets.solve_prompt, count_tokens=count)
        out.append(("solve", solve_prompts[e["task_id"]], response_text(e["plan"], e["code"])))
    for e in ex.get("improve", ()):
        p = e["prev"]
        prompt = prompts.improve_prompt(task(e["task_id"]), p["plan"], p["code"], p["output"],
                                        max_tokens=budgets.improve_prompt, count_tokens=count)
        out.append(("improve", prompt, response_text(e["plan"], e["code"])))
    for e in ex.get("instrument", ()):
        if e["answer"]:
            out.append(("instrument", lm_instrument.instrument_prompt(e["code"]), e["answer"]))
    return out


def tokenize(pairs: Sequence[tuple[str, str, str]], tokenizer, budgets: Budgets,
             ) -> tuple[list[tuple[str, list, list]], dict]:
    """(kind, prompt ids, response ids incl. EOS) per pair; over-budget pairs dropped.
    Returns the rows and counts {"kept", "dropped", "prompt_tokens", "response_tokens"}."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    rows, dropped = [], 0
    limit_p = {"solve": budgets.solve_prompt + 16, "improve": budgets.improve_prompt + 16,
               "instrument": budgets.instrument_prompt}
    for kind, prompt, resp in pairs:
        p = tokenizer(user_turn(prompt), add_special_tokens=False)["input_ids"]
        r = tokenizer(resp, add_special_tokens=False)["input_ids"] + [eos]
        if (len(p) > limit_p[kind] or len(r) > budgets.response
                or len(p) + len(r) - 1 > budgets.sequence):
            dropped += 1
            continue
        rows.append((kind, p, r))
    stats = {"kept": len(rows), "dropped": dropped,
             "prompt_tokens": sum(len(p) for _, p, _ in rows),
             "response_tokens": sum(len(r) for _, _, r in rows)}
    return rows, stats


def split_examples(ex: dict, held_out: float, seed: int) -> tuple[dict, dict]:
    """Examples ({kind: [...]}) -> (train, held-out), a random `held_out` fraction of each
    kind held out (split before any example is repeated, so none is on both sides)."""
    train, held = {}, {}
    for i, (kind, items) in enumerate(sorted(ex.items())):
        train[kind], held[kind] = split(list(items), held_out, seed + i)
    return train, held


def split(rows: list, held_out: float, seed: int) -> tuple[list, list]:
    """A random held-out fraction (at least one row when there are two or more)."""
    rng = random.Random(seed)
    idx = list(range(len(rows)))
    rng.shuffle(idx)
    n = max(1, int(round(held_out * len(rows)))) if len(rows) > 1 else 0
    return [rows[i] for i in idx[n:]], [rows[i] for i in idx[:n]]


def bucket_len(n: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if n <= b:
            return b
    raise ValueError(f"A sequence of {n} tokens exceeds the largest bucket {buckets[-1]}.")


def make_batch(rows: Sequence, length: int, batch: int, pad_id: int) -> dict:
    """Right-padded arrays: tokens/targets int32 [B, T], mask int32 [B, T] (1 = real
    token), loss_mask float32 [B, T] (1 where the target is a response token). Missing rows
    (len(rows) < batch) are all padding with a zero loss mask."""
    tok = np.full((batch, length), pad_id, np.int32)
    tgt = np.full((batch, length), pad_id, np.int32)
    mask = np.zeros((batch, length), np.int32)
    lmask = np.zeros((batch, length), np.float32)
    for i, (_, p, r) in enumerate(rows):
        seq = list(p) + list(r)
        n = len(seq)
        tok[i, :n - 1] = seq[:-1]
        tgt[i, :n - 1] = seq[1:]
        mask[i, :n - 1] = 1
        lmask[i, len(p) - 1:n - 1] = 1.0    # targets seq[len(p):] = the response
    return {"tokens": tok, "targets": tgt, "mask": mask, "loss_mask": lmask}


def rows_per_batch(length: int, tokens_per_batch: int, multiple: int = 1) -> int:
    """`tokens_per_batch // length` rounded down to a multiple of `multiple` (the mesh's
    data axis), at least `multiple`."""
    return max(multiple, (tokens_per_batch // length) // multiple * multiple)


def batches(rows: Sequence, buckets: Sequence[int], tokens_per_batch: int, pad_id: int,
            rng: random.Random, multiple: int = 1):
    """One epoch of batches: rows grouped by length bucket, shuffled, each batch holding
    `rows_per_batch` rows (a fixed shape per bucket, so few compilations)."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(bucket_len(len(row[1]) + len(row[2]) - 1, buckets), []).append(row)
    plan = []
    for length, grp in groups.items():
        rng.shuffle(grp)
        b = rows_per_batch(length, tokens_per_batch, multiple)
        plan += [(length, b, grp[i:i + b]) for i in range(0, len(grp), b)]
    rng.shuffle(plan)
    for length, b, grp in plan:
        yield make_batch(grp, length, b, pad_id)


def count_batches(rows: Sequence, buckets: Sequence[int], tokens_per_batch: int,
                  multiple: int = 1) -> int:
    """How many batches one epoch of `batches` yields."""
    sizes: dict = {}
    for row in rows:
        b = bucket_len(len(row[1]) + len(row[2]) - 1, buckets)
        sizes[b] = sizes.get(b, 0) + 1
    return sum(-(-n // rows_per_batch(b, tokens_per_batch, multiple))
               for b, n in sizes.items())
