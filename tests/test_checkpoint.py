"""Checkpoints: bit-exact round trips of a real learner state and host state, across meshes,
pruning, clear errors for incompatible/corrupt/missing checkpoints, and kill -9 mid-save."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mle_rl.agent import buffer as buf
from mle_rl.io import checkpoint as ck
from mle_rl.models import config as mcfg
from mle_rl.models import qwen2, sharding as shd
from mle_rl.rl import learner as lrn

CFG = mcfg.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=True)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _randomized(state, seed):
    """Same structure/shardings, every leaf filled with distinct non-trivial values."""
    rng = np.random.default_rng(seed)

    def fill(x):
        if np.issubdtype(x.dtype, np.floating):
            v = rng.standard_normal(x.shape).astype(x.dtype)
        else:
            v = rng.integers(0, 1000, x.shape).astype(x.dtype)
        return jax.device_put(v, x.sharding)

    return jax.tree.map(fill, state)


@pytest.fixture(scope="module")
def states():
    """(single-device TrainState, TrainState on a 2x2 mesh), randomized."""
    single = lrn.Learner(qwen2.init_model(CFG, seed=1), lrn.PPOConfig(), seed=0).state
    mesh = shd.make_mesh((2, 2))
    meshed = lrn.Learner(qwen2.init_model(CFG, seed=1), lrn.PPOConfig(), seed=0, mesh=mesh).state
    return _randomized(single, 1), _randomized(meshed, 2)


def abstract(state):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        state)


def assert_bit_equal(a, b):
    """Same tree structure (dict keys included), and each leaf the same dtype and bytes."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def assert_same_extra(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same_extra(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_extra(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


def make_extra(seed=0):
    """Host state as the trainer keeps it: archive, counters, config, buffer, numpy RNG."""
    b = buf.ReplayBuffer(capacity=16, max_staleness=4)
    rng = np.random.default_rng(seed)
    for i in range(3):
        b.add(buf.Rollout(request_id=i, task_id="iris", prompt_tokens=rng.integers(0, 60, 5 + i),
                          response_tokens=rng.integers(0, 60, 4), logprobs=rng.standard_normal(4),
                          policy_version=i, reward=float(rng.standard_normal()), duration_s=1.5,
                          status="ok", score=0.5 if i else None, meta={"hits": ["load"]}))
    np_rng = np.random.default_rng(seed + 7)
    np_rng.standard_normal(3)
    archive = {"iris": [{"plan": "use a forest", "code": "print(1)\n", "output": "acc 0.9",
                         "score": 0.87},
                        {"plan": "linear ✓", "code": "", "output": "", "score": None}],
               "empty_task": []}
    return {
        "archive": archive,
        "counters": {"updates": 5, "actions": 123, "nan_reward": float("nan")},
        "config": {"model": {"hidden_size": 32, "mesh": [2, 2]}, "max_steps": 300},
        "buffer": b.state_dict(),
        "np_rng": np_rng.bit_generator.state,        # contains 128-bit Python ints
        "legacy_rng": list(np.random.RandomState(seed).get_state()),
        "scalar": np.float32(1.25),
        "empty": np.zeros((0, 3), np.int64),
    }


def test_round_trip_is_bit_exact(states, tmp_path):
    state, _ = states
    extra = make_extra()
    c = ck.Checkpointer(tmp_path / "ckpt")
    assert c.save(5, state, extra) is True
    assert c.latest_step() == 5
    restored, got = c.restore(abstract_state=abstract(state))
    assert isinstance(restored, lrn.TrainState)
    assert sorted(restored.policy["layers"]) == [0, 1]           # int keys survive
    assert_bit_equal(restored, state)
    expected = dict(extra, legacy_rng=[extra["legacy_rng"][0], *extra["legacy_rng"][1:]])
    assert_same_extra(got, expected)
    # The buffer and the numpy generator continue exactly where they were.
    b2 = buf.ReplayBuffer(capacity=16, max_staleness=4)
    b2.load_state_dict(got["buffer"])
    assert_same_extra(b2.state_dict(), extra["buffer"])
    g1, g2 = np.random.default_rng(), np.random.default_rng()
    g1.bit_generator.state, g2.bit_generator.state = extra["np_rng"], got["np_rng"]
    assert np.array_equal(g1.standard_normal(5), g2.standard_normal(5))
    # The host state alone (e.g. the saved config) is readable without a model.
    assert c.read_extra()["config"] == extra["config"]
    c.close()


def test_restore_onto_another_mesh_and_back(states, tmp_path):
    single, meshed = states
    c = ck.Checkpointer(tmp_path / "ckpt")
    c.save(1, single, {})
    c.save(2, meshed, {})
    # 1-device checkpoint -> 2x2 mesh: values of the save, shardings of the target.
    onto_mesh, _ = c.restore(1, abstract_state=abstract(meshed))
    assert_bit_equal(onto_mesh, single)
    for got, want in zip(jax.tree.leaves(onto_mesh), jax.tree.leaves(meshed)):
        assert got.sharding == want.sharding
    assert any(len(x.sharding.device_set) == 4 for x in jax.tree.leaves(onto_mesh))
    # 2x2-mesh checkpoint -> one device.
    onto_one, _ = c.restore(2, abstract_state=abstract(single))
    assert_bit_equal(onto_one, meshed)
    assert all(len(x.sharding.device_set) == 1 for x in jax.tree.leaves(onto_one))
    c.close()


def test_async_save_copies_before_returning(tmp_path):
    state = {"w": jax.numpy.arange(1000.0), "layers": {0: jax.numpy.ones((4, 4))}}
    want = jax.tree.map(np.asarray, state)
    c = ck.Checkpointer(tmp_path, async_save=True)
    assert c.save(3, state, {"n": 1})
    assert not c.save(3, state, {"n": 2}, force=True)    # e.g. SIGTERM right after: no-op
    for x in jax.tree.leaves(state):      # as a donated update would
        x.delete()
    c.wait()
    got, extra = c.restore(abstract_state=jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), want))
    assert_bit_equal(got, want)
    assert extra == {"n": 1}
    c.close()


def test_every_keep_and_force(tmp_path):
    state = {"w": jax.numpy.zeros(3)}
    c = ck.Checkpointer(tmp_path, keep=2, every=2)
    saved = [s for s in range(7) if c.save(s, state, {"s": s})]
    assert saved == [0, 2, 4, 6]
    assert c.all_steps() == [4, 6]
    assert c.save(7, state, {}, force=True) and c.all_steps() == [6, 7]
    assert c.save(7, state, {}, force=True) is False       # already there: a no-op
    assert sorted(os.listdir(tmp_path)) == [".trash", "6", "7"]
    assert os.listdir(tmp_path / ".trash") == []          # old steps went through it
    assert c.read_extra(6) == {"s": 6}
    c.close()


def test_discard_after_moves_later_steps_aside_so_they_are_written_again(tmp_path):
    state = {"w": jax.numpy.arange(4.0)}
    c = ck.Checkpointer(tmp_path, keep=5)
    for s in range(1, 5):
        c.save(s, state, {"s": s})
    _damage(tmp_path / "4", "delete_item")      # e.g. the latest step is corrupt
    assert c.discard_after(4) == ([], None)
    moved, where = c.discard_after(2)
    assert moved == [3, 4] and c.all_steps() == [1, 2]
    assert os.path.dirname(where) == str(tmp_path)
    assert os.path.basename(where).startswith("discarded-")
    assert sorted(os.listdir(where)) == ["3", "4"]          # kept, not deleted
    assert c.should_save(3) and c.save(3, state, {"s": 33}) and c.all_steps() == [1, 2, 3]
    assert c.verify() == 3 and c.read_extra(3) == {"s": 33}
    assert c.discard_after(1)[1] != where                   # a new directory each time
    c.close()


def test_verify_reads_every_array_without_a_model(tmp_path):
    c = ck.Checkpointer(tmp_path)
    c.save(1, {"a": {"0": jax.numpy.ones(3)}, "b": jax.numpy.zeros((2, 2), np.int32)}, {})
    c.save(2, {"w": jax.numpy.asarray(np.arange(20000, dtype=np.float32))}, {})
    assert c.verify() == 2 and c.verify(1) == 1
    _damage(tmp_path / "2", "flip_state_bytes")
    with pytest.raises(ck.CheckpointError, match=r"checkpoint 2 .* corrupt .*fails its checksum"):
        c.verify()
    c.close()


def test_leftover_trash_is_swept_at_open_and_never_listed(tmp_path):
    c = ck.Checkpointer(tmp_path, keep=1)
    c.save(1, {"w": jax.numpy.zeros(3)}, {})
    c.close()
    half = tmp_path / ".trash" / "0"             # what a kill during a deletion leaves
    (half / "train_state").mkdir(parents=True)
    (half / "train_state" / "half").write_bytes(b"x")
    c = ck.Checkpointer(tmp_path, keep=1)
    assert c.all_steps() == [1] and os.listdir(tmp_path / ".trash") == []
    c.close()


def test_incompatible_state_names_the_first_difference(states, tmp_path):
    state, _ = states
    c = ck.Checkpointer(tmp_path)
    c.save(4, state, {})
    wider = abstract(state)._replace(policy=dict(
        abstract(state).policy, embed=jax.ShapeDtypeStruct((64, 48), np.float32)))
    with pytest.raises(ck.CheckpointError, match=r"checkpoint 4 .* incompatible .*"
                       r"policy\.embed is float32\[64, 32\] in the checkpoint but "
                       r"float32\[64, 48\] now"):
        c.restore(abstract_state=wider)
    fewer = abstract(state)._replace(
        policy=dict(abstract(state).policy, layers={0: abstract(state).policy["layers"][0]}))
    with pytest.raises(ck.CheckpointError, match=r"has policy\.layers\.1\.\S+ .* absent now"):
        c.restore(abstract_state=fewer)
    with pytest.raises(ck.CheckpointError, match=r"checkpoint 9 is not in .* \[4\]"):
        c.restore(9, abstract_state=abstract(state))
    c.close()


def _damage(step_dir, damage):
    """Truncates / overwrites / flips bytes in / deletes files of a saved step."""
    data = {item: [os.path.join(d, f) for d, _, fs in os.walk(step_dir / item) for f in fs
                   if os.path.basename(d) == "d"] for item in ("train_state", "host_arrays")}
    if damage in ("truncate_data", "garbage_data"):
        assert data["train_state"]
        for p in data["train_state"]:
            size = os.path.getsize(p)
            with open(p, "r+b") as f:
                if damage == "truncate_data":
                    f.truncate(size // 2)
                else:
                    f.write(np.random.default_rng(0).bytes(size))
    elif damage in ("flip_state_bytes", "flip_host_bytes"):
        # A few bytes in the middle of the largest file: the array payload, not its index.
        files = data["train_state" if damage == "flip_state_bytes" else "host_arrays"]
        p = max(files, key=os.path.getsize)
        with open(p, "r+b") as f:
            f.seek(os.path.getsize(p) // 2)
            b = f.read(4)
            f.seek(-4, 1)
            f.write(bytes(x ^ 0xFF for x in b))
    elif damage in ("garbage_meta", "edit_meta"):
        p = step_dir / "meta" / "metadata"
        text = p.read_text()
        assert '"score": 1.0' in text
        p.write_text("\x00{not json" if damage == "garbage_meta"
                     else text.replace('"score": 1.0', '"score": 2.0'))
    else:
        shutil.rmtree(step_dir / "train_state")


@pytest.mark.parametrize("damage", ["truncate_data", "garbage_data", "flip_state_bytes",
                                    "flip_host_bytes", "garbage_meta", "edit_meta",
                                    "delete_item"])
def test_corrupt_checkpoint_is_a_clear_error(damage, tmp_path):
    rng = np.random.default_rng(0)
    state = {"w": jax.numpy.asarray(rng.standard_normal((128, 128)), np.float32),
             "b": jax.numpy.ones(64)}
    extra = {"a": rng.standard_normal(20000), "archive": {"t": [{"score": 1.0}]}}
    c = ck.Checkpointer(tmp_path)
    c.save(1, state, extra)
    c.save(2, state, extra)
    _damage(tmp_path / "2", damage)
    c2 = ck.Checkpointer(tmp_path)
    assert c2.latest_step() == 2
    with pytest.raises(ck.CheckpointError, match=r"checkpoint 2 in .* is incomplete or corrupt "
                       r"\(.*\); delete .*2 or pass --resume_step=1\.$"):
        c2.restore(abstract_state=jax.tree.map(lambda x: jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=x.sharding), state))
    got, got_extra = c2.restore(1, abstract_state=state)      # the older one still works
    assert_bit_equal(got, state)
    assert_same_extra(got_extra, extra)
    c2.close()


def test_missing_directory_is_a_clear_error(tmp_path):
    c = ck.Checkpointer(tmp_path / "nope")
    with pytest.raises(ck.CheckpointError, match=r"no checkpoint to resume from: .*nope does "
                       r"not exist; run without --resume"):
        c.restore(abstract_state={"w": jax.ShapeDtypeStruct((2,), np.float32)})


def test_unsupported_values_are_rejected(tmp_path):
    c = ck.Checkpointer(tmp_path)
    with pytest.raises(ValueError, match=r"train-state leaf step is a int"):
        c.save(1, {"w": jax.numpy.zeros(2), "step": 3}, {})
    with pytest.raises(ValueError, match=r"extra\['a'\]\[1\] is a set"):
        c.save(1, {"w": jax.numpy.zeros(2)}, {"a": [1, {2}]})
    with pytest.raises(ValueError, match=r"extra\['d'\] has the key 3 of type int"):
        c.save(1, {"w": jax.numpy.zeros(2)}, {"d": {3: "x"}})
    assert c.all_steps() == []


def test_checksums_go_a_leaf_at_a_time_and_keep_their_values():
    """The checkpoint's checksums, one leaf per call, equal the formula's value over the
    whole state (old checkpoints still verify), and one call's temporaries are its own
    leaf's size, not the state's (a whole-state call held as much again as the state)."""
    from mle_rl.io import checkpoint_format as fmt
    flat = {"a": jnp.arange(4096, dtype=jnp.float32).reshape(64, 64),
            "b": jnp.ones((3, 5), jnp.bfloat16), "c": jnp.arange(7, dtype=jnp.int32),
            "d": jnp.array([True, False, True])}
    whole = jax.jit(lambda f: {k: fmt._leaf_checksum(v) for k, v in f.items()})
    sums = fmt.state_checksums(flat)
    assert sums == {k: int(v) for k, v in jax.device_get(whole(flat)).items()}
    # The formula by hand (uint32 sum of word * (2i + 1) * 0x9E3779B1) on leaf c's words.
    words = np.arange(7, dtype=np.uint64)
    expect = int(((words * (2 * words + 1) * 0x9E3779B1) % (1 << 32)).sum() % (1 << 32))
    assert sums["c"] == expect
    leaf = jax.ShapeDtypeStruct((256, 1024), jnp.float32)
    temp = fmt.leaf_checksum.lower(leaf).compile().memory_analysis().temp_size_in_bytes
    assert temp <= 1.1 * 256 * 1024 * 4                     # one leaf's size at most
