"""Host-side replay buffer of finished rollouts, with a staleness bound.

Actors finish actions out of order and at different speeds; the trainer turns each
`ActionDone` into a `Rollout` (the prompt and response tokens, the behaviour log-probs
from sampling time, the policy version that sampled it, reward, Δt, status) and `add`s
it. The learner `take`s a batch as soon as `batch_size` fresh rollouts are there, oldest
first by arrival. A rollout sampled more than `max_staleness` policy versions ago is
dropped (and counted) instead of being learned from: its importance ratios would be too
far from 1 for PPO's clip to mean much.

Groups (`group_size` > 1, for GRPO / RLOO): the samples of one prompt share a `group_id`
and are sampled by one policy version. A group is released to the learner only whole (all
`group_size` members arrived), oldest group first; when its version grows too stale the
whole group is dropped, the members that arrived and any that arrive later (counted in
`dropped_stale`, and once per group in `dropped_groups`). With `group_size` = 1 every
rollout is its own group and the buffer is a plain FIFO.

`collate` pads a batch into fixed-shape arrays for the jit'd update (layout in its
docstring); `state_dict` / `load_state_dict` save and restore the buffer exactly, as
numpy arrays and Python scalars, for checkpoints.

No JAX here: everything is NumPy on the host.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from typing import Iterable, Optional, Sequence

import numpy as np

from mle_rl.env.rewards import graded
from mle_rl.env.types import STATUSES

PROMPT_KINDS = ("solve", "improve", "expert")
STATUS_CODES = {name: i for i, name in enumerate(STATUSES)}
PROMPT_KIND_CODES = {name: i for i, name in enumerate(PROMPT_KINDS)}
COUNTERS = ("added", "taken", "dropped_stale", "dropped_capacity", "dropped_groups")


@dataclasses.dataclass
class Rollout:
    """One finished action, as the learner needs it.

    prompt_tokens: int32 [P]; response_tokens: int32 [N]; logprobs: float32 [N], the
    log-probability of each response token under the policy that sampled it.
    `meta` must be JSON-serializable (it is saved in checkpoints).
    """

    request_id: int
    task_id: str
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    logprobs: np.ndarray
    policy_version: int
    reward: float
    duration_s: float
    status: str
    score: Optional[float] = None
    prompt_kind: str = "solve"
    meta: dict = dataclasses.field(default_factory=dict)
    group_id: Optional[int] = None     # samples of one prompt share it; None: its own group

    @property
    def group(self) -> int:
        return self.request_id if self.group_id is None else self.group_id

    def __post_init__(self):
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int32)
        self.response_tokens = np.asarray(self.response_tokens, dtype=np.int32)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32)
        if self.prompt_tokens.ndim != 1 or self.response_tokens.ndim != 1:
            raise ValueError(
                f"rollout {self.request_id}: prompt_tokens and response_tokens must be 1-D, "
                f"got shapes {self.prompt_tokens.shape} and {self.response_tokens.shape}."
            )
        if self.logprobs.shape != self.response_tokens.shape:
            raise ValueError(
                f"rollout {self.request_id}: logprobs {self.logprobs.shape} must have one "
                f"entry per response token {self.response_tokens.shape}."
            )
        if self.status not in STATUS_CODES:
            raise ValueError(
                f"rollout {self.request_id}: unknown status {self.status!r}; "
                f"use one of {STATUSES}."
            )
        if self.prompt_kind not in PROMPT_KIND_CODES:
            raise ValueError(
                f"rollout {self.request_id}: unknown prompt_kind {self.prompt_kind!r}; "
                f"use one of {PROMPT_KINDS}."
            )


class ReplayBuffer:
    """FIFO of finished rollouts with a staleness bound and a capacity.

    Args:
      max_staleness: a rollout is dropped once `current_version - policy_version`
        exceeds this (0: only rollouts of the current policy are learned from).
      capacity: most rollouts held; adding to a full buffer drops the oldest (counted).
      group_size: members of a complete group (`Rollout.group_id`); 1 = no grouping.

    Thread-safe: actors' results may be added from one thread while the learner takes.
    """

    def __init__(self, max_staleness: int, capacity: int, group_size: int = 1):
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}.")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}.")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}.")
        self.max_staleness = int(max_staleness)
        self.capacity = int(capacity)
        self.group_size = int(group_size)
        self._items: collections.deque = collections.deque()
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._dropped_groups: collections.OrderedDict = collections.OrderedDict()  # recent ids
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def counters(self) -> dict:
        """added, taken, dropped_stale, dropped_capacity, dropped_groups (copies)."""
        with self._lock:
            return dict(self._counters)

    def add(self, rollout: Rollout) -> None:
        """Appends a rollout; if the buffer is full the oldest one is dropped first."""
        if not isinstance(rollout, Rollout):
            raise TypeError(f"ReplayBuffer.add takes a Rollout, got {type(rollout).__name__}.")
        with self._lock:
            self._counters["added"] += 1
            if rollout.group in self._dropped_groups:    # a straggler of a dropped group
                self._counters["dropped_stale"] += 1
                return
            if len(self._items) >= self.capacity:
                self._items.popleft()
                self._counters["dropped_capacity"] += 1
            self._items.append(rollout)

    def drop_stale(self, current_version: int) -> int:
        """Drops rollouts older than `max_staleness` versions; returns how many."""
        with self._lock:
            return self._drop_stale(current_version)

    def _drop_stale(self, current_version: int) -> int:
        stale = {r.group for r in self._items
                 if current_version - r.policy_version > self.max_staleness}
        if not stale:
            return 0
        fresh = [r for r in self._items if r.group not in stale]
        dropped = len(self._items) - len(fresh)
        self._items = collections.deque(fresh)
        self._counters["dropped_stale"] += dropped
        if self.group_size > 1:
            self._counters["dropped_groups"] += len(stale)
            for g in stale:                      # remembered, so stragglers go too
                self._dropped_groups[g] = None
            while len(self._dropped_groups) > 4 * self.capacity:
                self._dropped_groups.popitem(last=False)
        return dropped

    def _complete_groups(self) -> list:
        """Indices into `_items` of each complete group, oldest group (first arrival) first."""
        if self.group_size == 1:
            return [[i] for i in range(len(self._items))]
        members: dict = {}
        for i, r in enumerate(self._items):
            members.setdefault(r.group, []).append(i)
        return [ix[:self.group_size] for ix in members.values() if len(ix) >= self.group_size]

    def ready(self, batch_size: int, current_version: int) -> bool:
        """True if `batch_size` fresh rollouts in complete groups are waiting (drops stale
        ones first)."""
        with self._lock:
            self._drop_stale(current_version)
            if self.group_size == 1:
                return len(self._items) >= batch_size
            return len(self._complete_groups()) * self.group_size >= batch_size

    def take(self, batch_size: int, current_version: int) -> list:
        """Removes and returns the `batch_size` oldest fresh rollouts, in arrival order (whole
        groups, each group's members together, oldest group first).

        Drops stale rollouts first. Raises if fewer than `batch_size` are fresh and in
        complete groups: call `ready` first.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if batch_size % self.group_size:
            raise ValueError(f"batch_size {batch_size} is not a multiple of the group size "
                             f"{self.group_size}; a batch holds whole groups.")
        with self._lock:
            self._drop_stale(current_version)
            groups = self._complete_groups()[:batch_size // self.group_size]
            if len(groups) * self.group_size < batch_size:
                whole = " in complete groups" if self.group_size > 1 else ""
                raise ValueError(
                    f"only {len(groups) * self.group_size} fresh rollouts{whole} for a batch "
                    f"of {batch_size}; check ready() before take()."
                )
            chosen = [i for ix in groups for i in ix]
            items = list(self._items)
            batch = [items[i] for i in chosen]
            keep = set(chosen)
            self._items = collections.deque(r for i, r in enumerate(items) if i not in keep)
            self._counters["taken"] += batch_size
            return batch

    # ------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict:
        """The buffer's contents and counters as numpy arrays and Python scalars.

        Variable-length tokens are stored flat with offsets ([R + 1] int64); strings and
        `meta` are one UTF-8 JSON document stored as a uint8 array.
        """
        with self._lock:
            return _pack(list(self._items), self._counters)

    def load_state_dict(self, state: dict) -> None:
        """Restores what `state_dict` returned (replacing the current contents)."""
        rollouts, counters = _unpack(state)
        if len(rollouts) > self.capacity:
            raise ValueError(
                f"the saved buffer holds {len(rollouts)} rollouts, more than this buffer's "
                f"capacity {self.capacity}; restore it with a capacity of at least that."
            )
        with self._lock:
            self._items = collections.deque(rollouts)
            self._counters = counters


def _flat(arrays: Sequence[np.ndarray], dtype) -> tuple:
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.concatenate(arrays).astype(dtype) if arrays else np.zeros([0], dtype)
    return flat, offsets


def _pack(rollouts: list, counters: dict) -> dict:
    prompt, prompt_offsets = _flat([r.prompt_tokens for r in rollouts], np.int32)
    response, response_offsets = _flat([r.response_tokens for r in rollouts], np.int32)
    logprobs, _ = _flat([r.logprobs for r in rollouts], np.float32)
    text = {
        "task_id": [r.task_id for r in rollouts],
        "status": [r.status for r in rollouts],
        "prompt_kind": [r.prompt_kind for r in rollouts],
        "meta": [r.meta for r in rollouts],
    }
    try:
        blob = json.dumps(text).encode("utf-8")
    except TypeError as e:
        raise ValueError(f"a rollout's meta is not JSON-serializable ({e}); "
                         "keep only plain values in Rollout.meta.") from None
    return {
        "request_id": np.array([r.request_id for r in rollouts], dtype=np.int64),
        "policy_version": np.array([r.policy_version for r in rollouts], dtype=np.int64),
        "reward": np.array([r.reward for r in rollouts], dtype=np.float64),
        "duration_s": np.array([r.duration_s for r in rollouts], dtype=np.float64),
        "score": np.array([np.nan if r.score is None else r.score for r in rollouts],
                          dtype=np.float64),
        "has_score": np.array([r.score is not None for r in rollouts], dtype=bool),
        "prompt_tokens": prompt, "prompt_offsets": prompt_offsets,
        "response_tokens": response, "response_offsets": response_offsets,
        "logprobs": logprobs,
        "group_id": np.array([r.group for r in rollouts], dtype=np.int64),
        "text_json": np.frombuffer(blob, dtype=np.uint8).copy(),
        **{f"counter_{k}": int(v) for k, v in counters.items()},
    }


def _unpack(state: dict) -> tuple:
    try:
        text = json.loads(np.asarray(state["text_json"], dtype=np.uint8).tobytes())
        po, ro = np.asarray(state["prompt_offsets"]), np.asarray(state["response_offsets"])
        groups = state.get("group_id", state["request_id"])      # older checkpoints: none
        rollouts = []
        for i in range(len(state["request_id"])):
            rollouts.append(Rollout(
                request_id=int(state["request_id"][i]),
                task_id=text["task_id"][i],
                prompt_tokens=np.asarray(state["prompt_tokens"])[po[i]:po[i + 1]].copy(),
                response_tokens=np.asarray(state["response_tokens"])[ro[i]:ro[i + 1]].copy(),
                logprobs=np.asarray(state["logprobs"])[ro[i]:ro[i + 1]].copy(),
                policy_version=int(state["policy_version"][i]),
                reward=float(state["reward"][i]),
                duration_s=float(state["duration_s"][i]),
                status=text["status"][i],
                score=float(state["score"][i]) if bool(state["has_score"][i]) else None,
                prompt_kind=text["prompt_kind"][i],
                meta=text["meta"][i],
                group_id=int(groups[i]),
            ))
        counters = {k: int(state.get(f"counter_{k}", 0)) for k in COUNTERS}
        counters.update({k: int(state[f"counter_{k}"]) for k in COUNTERS[:4]})
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise ValueError(
            f"the saved replay buffer state is incomplete or corrupt ({type(e).__name__}: {e}); "
            "restore from another checkpoint or start with an empty buffer."
        ) from None
    return rollouts, counters


def collate(rollouts: Iterable[Rollout], max_prompt_len: int, max_response_len: int,
            pad_id: int) -> dict:
    """Pads a batch of rollouts into fixed-shape arrays for the learner.

    Layout, with P = max_prompt_len, N = max_response_len, T = P + N: each row is its
    prompt right-aligned in columns [0, P) (left-padded with `pad_id`), then its response
    left-aligned from column P (right-padded). So the response always starts at column P,
    and the logits at column t - 1 give log π(tokens[t] | tokens[<t]) for every response
    column t (t >= P; a row's prompt is never empty, so column P - 1 is a real token).

    Returns (B = len(rollouts)):
      tokens              int32   [B, T]  pad_id outside real tokens
      attention_mask      int32   [B, T]  1 on prompt and response tokens
      positions           int32   [B, T]  0, 1, ... from each row's first real token
                                          (0 on left padding), for rotary embeddings
      response_mask       int32   [B, T]  1 on response tokens
      behaviour_logprobs  float32 [B, T]  sampling-time log-prob at each response token, 0
      rewards             float32 [B]
      durations           float32 [B]     Δt, seconds
      policy_version      int32   [B]
      status              int32   [B]     index into mle_rl.env.types.STATUSES
      valid               float32 [B]     1 for a graded submission (env.rewards.graded:
                                          status "ok", a finite score)
      prompt_kind         int32   [B]     index into PROMPT_KINDS
      scores              float32 [B]     NaN where there is no score
      prompt_lengths, response_lengths  int32 [B]
      request_id          int64   [B]
      group_ids           int32   [B]     0, 1, ... per distinct group, in order of appearance
    """
    rollouts = list(rollouts)
    if not rollouts:
        raise ValueError("collate needs at least one rollout.")
    batch, p, n = len(rollouts), int(max_prompt_len), int(max_response_len)
    t = p + n
    tokens = np.full([batch, t], pad_id, dtype=np.int32)
    attention = np.zeros([batch, t], dtype=np.int32)
    response_mask = np.zeros([batch, t], dtype=np.int32)
    behaviour = np.zeros([batch, t], dtype=np.float32)
    for b, r in enumerate(rollouts):
        lp, lr = len(r.prompt_tokens), len(r.response_tokens)
        if lp == 0 or lp > p:
            raise ValueError(
                f"rollout {r.request_id} has a prompt of {lp} tokens; collate needs 1 to "
                f"max_prompt_len={p} (raise max_prompt_len to the sampler's prompt limit)."
            )
        if lr > n:
            raise ValueError(
                f"rollout {r.request_id} has a response of {lr} tokens, more than "
                f"max_response_len={n}; set it to the sampler's max_new_tokens or more."
            )
        tokens[b, p - lp:p] = r.prompt_tokens
        tokens[b, p:p + lr] = r.response_tokens
        attention[b, p - lp:p + lr] = 1
        response_mask[b, p:p + lr] = 1
        behaviour[b, p:p + lr] = r.logprobs
    positions = np.maximum(np.cumsum(attention, axis=1) - 1, 0).astype(np.int32)

    def column(get, dtype):
        return np.array([get(r) for r in rollouts], dtype=dtype)

    return {
        "tokens": tokens,
        "attention_mask": attention,
        "positions": positions,
        "response_mask": response_mask,
        "behaviour_logprobs": behaviour,
        "rewards": column(lambda r: r.reward, np.float32),
        "durations": column(lambda r: r.duration_s, np.float32),
        "policy_version": column(lambda r: r.policy_version, np.int32),
        "status": column(lambda r: STATUS_CODES[r.status], np.int32),
        "valid": column(lambda r: graded(r.status, r.score), np.float32),
        "prompt_kind": column(lambda r: PROMPT_KIND_CODES[r.prompt_kind], np.int32),
        "scores": column(lambda r: np.nan if r.score is None else r.score, np.float32),
        "prompt_lengths": column(lambda r: len(r.prompt_tokens), np.int32),
        "response_lengths": column(lambda r: len(r.response_tokens), np.int32),
        "request_id": column(lambda r: r.request_id, np.int64),
        "group_ids": _dense_ids([r.group for r in rollouts]),
    }


def _dense_ids(ids: list) -> np.ndarray:
    """[7, 7, 3, 7] -> [0, 0, 1, 0]: each distinct id's index in order of first appearance."""
    index: dict = {}
    return np.array([index.setdefault(i, len(index)) for i in ids], dtype=np.int32)
