"""Checkpoints under kill -9 and abandoned reads: a save killed mid-way is never the latest,
resume configs must match, restore errors are one line, a killed training run resumes.
(Split from test_checkpoint.py; its helpers are imported from there.)"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from mle_rl.io import checkpoint as ck
from mle_rl.io import checkpoint_format as ckf
from mle_rl.io import metrics_log as ml
from mle_rl.models import qwen2
from mle_rl.rl import learner as lrn
from tests.test_checkpoint import CFG, REPO, _damage, abstract


def _child_env() -> dict:
    """A child Python that imports this checkout, on one CPU device."""
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env

_KILLED_SAVE = textwrap.dedent("""
    import sys, time
    import numpy as np
    import jax
    from orbax.checkpoint._src.path import atomicity
    from mle_rl.io import checkpoint as ck

    c = ck.Checkpointer(sys.argv[1])
    state = {"w": jax.numpy.asarray(np.arange(1 << 18, dtype=np.float32)),
             "step": jax.numpy.int32(1)}
    c.save(1, state, {"archive": {"t": [{"score": 0.5}]}, "a": np.arange(10)})

    async def hang(self):            # every item written, the step not yet committed
        print("COMMITTING", flush=True)
        time.sleep(600)

    atomicity.AtomicRenameTemporaryPath.finalize = hang
    state2 = {"w": state["w"] * 2, "step": jax.numpy.int32(2)}
    c.save(2, state2, {"archive": {"t": [{"score": 0.9}]}, "a": np.arange(10) * 2})
    print("SAVED", flush=True)
""")


def test_save_killed_mid_way_is_never_the_latest(tmp_path):
    env = _child_env()
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line == "COMMITTING", line
        tmp_dirs = [d for d in os.listdir(tmp_path) if d.startswith("2.")]
        assert tmp_dirs and "2" not in os.listdir(tmp_path)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    c = ck.Checkpointer(tmp_path)
    assert c.latest_step() == 1 and c.all_steps() == [1]
    state, extra = c.restore(abstract_state={
        "step": jax.ShapeDtypeStruct((), np.int32),
        "w": jax.ShapeDtypeStruct((1 << 18,), np.float32)})
    assert np.array_equal(np.asarray(state["w"]), np.arange(1 << 18, dtype=np.float32))
    assert int(state["step"]) == 1 and extra["archive"] == {"t": [{"score": 0.5}]}
    assert np.array_equal(extra["a"], np.arange(10))
    # And the run goes on: the next save of step 2 works.
    assert c.save(2, {"w": state["w"], "step": state["step"] + 1}, {})
    assert c.all_steps() == [1, 2]
    assert sorted(os.listdir(tmp_path)) == ["1", "2"]       # the half-save was cleaned up
    c.close()


def test_config_compatibility():
    saved = {"model": {"hidden_size": 32, "layers": 2, "logits_soft_cap": None},
             "tasks": ["iris"], "max_steps": 100, "log_every": 1, "mesh": (2, 2),
             "train": {"workdir": "/a"}}
    now = dict(saved, max_steps=300, log_every=5, mesh=[2, 2], train={"workdir": "/b"})
    d = ck.compatible(saved, now)
    assert d.ok and [p for p, *_ in d.allowed] == ["log_every", "max_steps", "train.workdir"]
    capped = dict(now, model=dict(saved["model"], logits_soft_cap=30.0))
    assert [p for p, *_ in ck.compatible(saved, capped).incompatible] == [
        "model.logits_soft_cap"]
    bad = dict(now, model=dict(saved["model"], hidden_size=64), tasks=["iris", "pizza"])
    d = ck.compatible(saved, bad)
    assert not d.ok and [p for p, *_ in d.incompatible] == ["model.hidden_size", "tasks"]
    assert "model.hidden_size: 32 -> 64" in d.describe()
    d = ck.compatible(saved, bad, keys=("model.*",))
    assert [p for p, *_ in d.incompatible] == ["model.hidden_size"]
    with pytest.raises(ck.CheckpointError, match=r"checkpoint 7 in /x was made with a "
                       r"different config \(model.hidden_size: 32 -> 64; tasks"):
        ck.check_compatible(saved, bad, directory="/x", step=7)


def test_only_the_echoes_of_abandoned_reads_are_dropped(tmp_path, monkeypatch, caplog):
    import logging

    async def read():
        pass

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setitem(ck._ABANDONED, "reads", False)
    c = ck.Checkpointer(tmp_path)
    c.save(1, {"w": jax.numpy.zeros(3)}, {})
    c.read_extra(1)                             # a first read installs the filters
    report = type("Unraisable", (), {})
    closed, other, coro = report(), report(), report()
    closed.object, closed.exc_value = None, RuntimeError("Event loop is closed")
    other.object, other.exc_value = None, RuntimeError("something else")
    coro.object, coro.exc_value = read(), Exception("read failed")
    coro.object.close()
    log = logging.getLogger("asyncio")
    never = "Task exception was never retrieved\nfuture: <Task finished coro=<read()>>"
    for failed in (False, True):
        if failed:
            _damage(tmp_path / "1", "delete_item")
            with pytest.raises(ck.CheckpointError):
                c.restore(abstract_state={"w": jax.ShapeDtypeStruct((3,), np.float32)})
        seen.clear()
        caplog.clear()
        for r in (closed, other, coro):
            sys.unraisablehook(r)
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            log.error(never)
            log.error("something else went wrong")
        # Closed-loop reports always go; the rest only once a read has failed.
        assert seen == ([other] if failed else [other, coro])
        assert len(caplog.records) == (1 if failed else 2)
    c.close()


_TRAINING_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    from mle_rl.io import checkpoint as ck, checkpoint_format as ckf, metrics_log as ml
    from mle_rl.models import qwen2
    from mle_rl.rl import learner as lrn
    from tests.test_learner import CFG, make_batch

    work = sys.argv[1]
    learner = lrn.Learner(qwen2.init_model(CFG, seed=1),
                          lrn.PPOConfig(actor_lr=1e-3, logprob_chunk=4), seed=0)
    ckpt = ck.Checkpointer(work + "/checkpoints", keep=2)
    log = ml.MetricsLogger(work, tensorboard=False)
    np_rng = np.random.default_rng(0)
    archive = {"iris": []}
    batch = make_batch(learner.policy())
    for step in range(1, 10_000):
        metrics = learner.update(batch)
        archive["iris"].append({"plan": f"plan {step}", "code": "print()", "output": "",
                                "score": float(np_rng.random())})
        extra = {"archive": archive, "np_rng": np_rng.bit_generator.state,
                 "counters": {"updates": step}}
        # What this step's checkpoint must restore to, written before the save.
        flat, _ = ckf.flatten_state(learner.state)
        np.savez(f"{work}/ref_{step}.npz", **{k: np.asarray(v) for k, v in flat.items()})
        with open(f"{work}/ref_{step}.json", "w") as f:
            json.dump(extra, f)
        ckpt.save(step, learner.state, extra)
        log.log(step, metrics)
        print("SAVED", step, flush=True)
""")


@pytest.mark.slow
def test_training_run_killed_then_resumed(tmp_path):
    """kill -9 of a real update/save/log loop; the resume sees exactly the last saved step."""
    env = _child_env()
    proc = subprocess.Popen([sys.executable, "-c", _TRAINING_RUN, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "SAVED 3":
                break
        else:
            pytest.fail(f"the training run ended early: {proc.stderr.read()[-2000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    fresh = lrn.Learner(qwen2.init_model(CFG, seed=5), lrn.PPOConfig(logprob_chunk=4), seed=9)
    c = ck.Checkpointer(tmp_path / "checkpoints", keep=2)
    step = c.latest_step()
    assert step >= 3 and len(c.all_steps()) <= 2
    state, extra = c.restore(abstract_state=abstract(fresh.state))
    ref = np.load(tmp_path / f"ref_{step}.npz")
    flat, _ = ckf.flatten_state(state)
    assert sorted(flat) == sorted(ref.files)
    for k, v in flat.items():                 # parameters, both optimizers, step, rng
        assert np.asarray(v).tobytes() == ref[k].tobytes(), k
    assert int(state.step) == step and sorted(state.policy["layers"]) == [0, 1]
    with open(tmp_path / f"ref_{step}.json") as f:
        assert extra == json.load(f)          # archive, numpy RNG state, counters
    assert len(extra["archive"]["iris"]) == step
    log = ml.MetricsLogger(tmp_path, tensorboard=False, resume_step=step)
    log.close()
    assert [r["step"] for r in ml.read_metrics(tmp_path / "metrics.jsonl")] == list(
        range(1, step + 1))
    c.close()
