"""ReplayBuffer: FIFO, staleness, capacity, exact state round trip; collate layout."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mle_rl.agent.buffer import PROMPT_KINDS, ReplayBuffer, Rollout, collate
from mle_rl.env.types import STATUSES


def _rollout(i, version=0, prompt_len=3, response_len=2, **kw):
    rng = np.random.default_rng(i)
    fields = dict(
        request_id=i, task_id=f"task-{i % 2}",
        prompt_tokens=rng.integers(1, 100, prompt_len),
        response_tokens=rng.integers(1, 100, response_len),
        logprobs=-rng.random(response_len),
        policy_version=version, reward=float(i) / 10, duration_s=1.0 + i,
        status="ok", score=0.5 + i / 100, prompt_kind="solve", meta={"i": i},
    )
    fields.update(kw)
    return Rollout(**fields)


def test_take_is_oldest_first_by_arrival():
    buf = ReplayBuffer(max_staleness=10, capacity=100)
    # Arrival order differs from request order and policy version.
    for i, version in [(5, 2), (1, 0), (9, 3), (2, 1)]:
        buf.add(_rollout(i, version))
    assert not buf.ready(5, current_version=3) and buf.ready(4, current_version=3)
    assert [r.request_id for r in buf.take(3, current_version=3)] == [5, 1, 9]
    assert [r.request_id for r in buf.take(1, current_version=3)] == [2]
    assert len(buf) == 0
    assert buf.counters == {"added": 4, "taken": 4, "dropped_stale": 0, "dropped_capacity": 0,
                            "dropped_groups": 0}
    with pytest.raises(ValueError, match="only 0 fresh rollouts for a batch of 1"):
        buf.take(1, current_version=3)


def test_stale_rollouts_are_dropped_and_counted():
    buf = ReplayBuffer(max_staleness=1, capacity=100)
    for i, version in enumerate([0, 1, 2, 0, 2, 3]):
        buf.add(_rollout(i, version))
    # At version 2, staleness = 2 - v: versions 0 are stale (2 > 1), 1 is fine (1 <= 1).
    assert buf.ready(4, current_version=2) and not buf.ready(5, current_version=2)
    assert buf.counters["dropped_stale"] == 2
    assert [r.request_id for r in buf.take(2, current_version=2)] == [1, 2]
    # At version 3, rollout 4 (v2) is still fresh and 5 (v3) too.
    assert buf.drop_stale(current_version=3) == 0
    assert buf.drop_stale(current_version=4) == 1  # rollout 4 (v2) goes
    assert [r.request_id for r in buf.take(1, current_version=4)] == [5]
    assert buf.counters == {"added": 6, "taken": 3, "dropped_stale": 3, "dropped_capacity": 0,
                            "dropped_groups": 0}


def test_max_staleness_zero_keeps_only_current_policy():
    buf = ReplayBuffer(max_staleness=0, capacity=10)
    buf.add(_rollout(0, version=4))
    buf.add(_rollout(1, version=5))
    assert [r.request_id for r in buf.take(1, current_version=5)] == [1]
    assert buf.counters["dropped_stale"] == 1


def test_capacity_drops_oldest_and_counts():
    buf = ReplayBuffer(max_staleness=10, capacity=3)
    for i in range(5):
        buf.add(_rollout(i))
    assert len(buf) == 3
    assert [r.request_id for r in buf.take(3, current_version=0)] == [2, 3, 4]
    assert buf.counters["dropped_capacity"] == 2 and buf.counters["added"] == 5


def test_state_dict_round_trip_is_exact(tmp_path):
    buf = ReplayBuffer(max_staleness=2, capacity=10)
    lengths = [(3, 2), (1, 0), (5, 7), (2, 1)]
    for i, (lp, lr) in enumerate(lengths):
        buf.add(_rollout(i, version=i, prompt_len=lp, response_len=lr,
                         score=None if i == 1 else 0.25 * i,
                         status=STATUSES[i], prompt_kind=PROMPT_KINDS[i % 3],
                         meta={"i": i, "note": "ünïcode", "nested": [1, {"a": None}]}))
    buf.take(1, current_version=3)  # drops rollout 0 (3 - 0 > 2), takes rollout 1
    state = buf.state_dict()
    assert all(isinstance(v, (np.ndarray, int)) for v in state.values())
    np.savez(tmp_path / "buf.npz", **state)  # survives a plain numpy file
    loaded = dict(np.load(tmp_path / "buf.npz"))
    other = ReplayBuffer(max_staleness=2, capacity=10)
    other.load_state_dict(loaded)
    assert other.counters == buf.counters
    assert len(other) == len(buf) == 2
    for a, b in zip(buf.take(2, 3), other.take(2, 3)):
        for field in ("request_id", "task_id", "policy_version", "reward", "duration_s",
                      "status", "score", "prompt_kind", "meta"):
            assert getattr(a, field) == getattr(b, field), field
        for field in ("prompt_tokens", "response_tokens", "logprobs"):
            x, y = getattr(a, field), getattr(b, field)
            assert x.dtype == y.dtype and np.array_equal(x, y), field


def test_state_dict_of_empty_buffer_and_bad_state():
    buf = ReplayBuffer(max_staleness=1, capacity=4)
    other = ReplayBuffer(max_staleness=1, capacity=4)
    other.load_state_dict(buf.state_dict())
    assert len(other) == 0 and other.counters == buf.counters
    state = buf.state_dict()
    del state["text_json"]
    with pytest.raises(ValueError, match="incomplete or corrupt"):
        other.load_state_dict(state)
    full = ReplayBuffer(max_staleness=1, capacity=4)
    for i in range(3):
        full.add(_rollout(i))
    with pytest.raises(ValueError, match="capacity of at least that"):
        ReplayBuffer(max_staleness=1, capacity=2).load_state_dict(full.state_dict())


def test_collate_layout_shapes_and_masks():
    rollouts = [
        _rollout(0, prompt_len=2, response_len=3, status="ok", score=0.7),
        _rollout(1, version=4, prompt_len=4, response_len=1, status="timeout", score=None,
                 prompt_kind="improve"),
    ]
    batch = collate(rollouts, max_prompt_len=4, max_response_len=3, pad_id=-1)
    assert batch["tokens"].shape == (2, 7) and batch["tokens"].dtype == np.int32
    for key in ("attention_mask", "positions", "response_mask", "behaviour_logprobs"):
        assert batch[key].shape == (2, 7), key
    assert batch["behaviour_logprobs"].dtype == np.float32
    r0, r1 = rollouts
    # Row 0: [pad, pad, p0, p1 | r0, r1, r2]; row 1: [p0..p3 | r0, pad, pad].
    np.testing.assert_array_equal(
        batch["tokens"][0], np.r_[-1, -1, r0.prompt_tokens, r0.response_tokens])
    np.testing.assert_array_equal(
        batch["tokens"][1], np.r_[r1.prompt_tokens, r1.response_tokens, -1, -1])
    np.testing.assert_array_equal(batch["response_mask"], [[0, 0, 0, 0, 1, 1, 1],
                                                           [0, 0, 0, 0, 1, 0, 0]])
    np.testing.assert_array_equal(batch["attention_mask"], [[0, 0, 1, 1, 1, 1, 1],
                                                            [1, 1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(batch["positions"], [[0, 0, 0, 1, 2, 3, 4],
                                                       [0, 1, 2, 3, 4, 4, 4]])
    np.testing.assert_allclose(batch["behaviour_logprobs"][0, 4:], r0.logprobs)
    np.testing.assert_allclose(batch["behaviour_logprobs"][1], [0, 0, 0, 0, r1.logprobs[0], 0, 0])
    np.testing.assert_allclose(batch["rewards"], [0.0, 0.1], rtol=1e-6)
    np.testing.assert_allclose(batch["durations"], [1.0, 2.0])
    np.testing.assert_array_equal(batch["policy_version"], [0, 4])
    np.testing.assert_array_equal(batch["status"], [STATUSES.index("ok"),
                                                    STATUSES.index("timeout")])
    np.testing.assert_array_equal(batch["valid"], [1.0, 0.0])        # graded or not
    np.testing.assert_array_equal(batch["prompt_kind"], [0, 1])
    assert batch["scores"][0] == np.float32(0.7) and np.isnan(batch["scores"][1])
    np.testing.assert_array_equal(batch["prompt_lengths"], [2, 4])
    np.testing.assert_array_equal(batch["response_lengths"], [3, 1])


def test_collate_rejects_what_does_not_fit():
    with pytest.raises(ValueError, match="max_response_len=2"):
        collate([_rollout(0, response_len=3)], 8, 2, pad_id=0)
    with pytest.raises(ValueError, match="max_prompt_len=2"):
        collate([_rollout(0, prompt_len=3)], 2, 8, pad_id=0)
    with pytest.raises(ValueError, match="at least one rollout"):
        collate([], 2, 2, pad_id=0)


def test_rollout_validation_messages():
    with pytest.raises(ValueError, match="one entry per response token"):
        _rollout(0, logprobs=np.zeros(5))
    with pytest.raises(ValueError, match="unknown status 'crashed'"):
        _rollout(0, status="crashed")
    with pytest.raises(ValueError, match="unknown prompt_kind"):
        _rollout(0, prompt_kind="other")
    r = _rollout(0)
    assert r.prompt_tokens.dtype == np.int32 and r.logprobs.dtype == np.float32


def test_concurrent_adds_and_takes_lose_nothing():
    buf = ReplayBuffer(max_staleness=0, capacity=10_000)
    taken = []

    def producer(start):
        for i in range(start, start + 500):
            buf.add(_rollout(i, prompt_len=1, response_len=1))

    threads = [threading.Thread(target=producer, args=(k * 500,)) for k in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads) or len(buf) >= 7:
        if buf.ready(7, 0):
            taken += buf.take(7, 0)
    for t in threads:
        t.join()
    if len(buf):
        taken += buf.take(len(buf), 0)
    ids = [r.request_id for r in taken]
    assert sorted(ids) == list(range(2000))
    assert buf.counters["added"] == 2000 and buf.counters["taken"] == 2000


def _member(i, group, version=0, **kw):
    return _rollout(i, version, group_id=group, **kw)


def test_a_group_is_released_only_when_complete_oldest_group_first():
    buf = ReplayBuffer(max_staleness=10, capacity=100, group_size=3)
    # Members of groups 7 and 4 arrive interleaved; group 7 started first.
    for i, g in [(0, 7), (1, 4), (2, 7), (3, 4), (4, 4)]:
        buf.add(_member(i, g))
    assert buf.ready(3, 0) and not buf.ready(6, 0)            # 4 is whole, 7 is not
    assert [r.request_id for r in buf.take(3, 0)] == [1, 3, 4]
    buf.add(_member(5, 7))
    assert [(r.request_id, r.group_id) for r in buf.take(3, 0)] == [(0, 7), (2, 7), (5, 7)]
    with pytest.raises(ValueError, match="not a multiple of the group size 3"):
        buf.take(4, 0)


def test_a_stale_group_is_dropped_whole_with_its_stragglers_and_counted():
    buf = ReplayBuffer(max_staleness=1, capacity=100, group_size=2)
    buf.add(_member(0, group=1, version=0))                   # its partner is slow
    buf.add(_member(1, group=2, version=2))
    buf.add(_member(2, group=2, version=2))
    assert buf.ready(2, current_version=2)                    # group 1 (v0) is now stale
    c = buf.counters
    assert (c["dropped_stale"], c["dropped_groups"]) == (1, 1) and len(buf) == 2
    buf.add(_member(3, group=1, version=0))                   # the straggler arrives
    assert buf.counters["dropped_stale"] == 2 and buf.counters["dropped_groups"] == 1
    assert [r.group_id for r in buf.take(2, 2)] == [2, 2] and len(buf) == 0


def test_group_ids_survive_the_state_dict_and_collate_densely():
    buf = ReplayBuffer(max_staleness=5, capacity=10, group_size=2)
    for i, g in enumerate([9, 3, 9, 3]):
        buf.add(_member(i, g))
    other = ReplayBuffer(max_staleness=5, capacity=10, group_size=2)
    other.load_state_dict(buf.state_dict())
    batch = other.take(4, 0)
    assert [r.group_id for r in batch] == [9, 9, 3, 3]
    np.testing.assert_array_equal(collate(batch, 4, 4, 0)["group_ids"], [0, 0, 1, 1])
    old = buf.state_dict()                                    # a checkpoint from before groups
    del old["group_id"], old["counter_dropped_groups"]
    plain = ReplayBuffer(max_staleness=5, capacity=10)
    plain.load_state_dict(old)
    assert [r.group for r in plain.take(4, 0)] == [0, 1, 2, 3]   # each its own group
