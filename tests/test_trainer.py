"""The trainer end to end: run.py, metrics, checkpoints, resume after kill -9, SIGINT, config errors.

The policy here is a random `micro` model with a byte tokenizer: it writes no code, so
every action fails fast; these tests check the plumbing, not learning.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from absl import flags

from mle_rl import config

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASK = "breast-cancer-diagnosis"
COMMON = [
    f"--tasks={TASK}", "--policy_dir=random", "--model_preset=micro", "--batch_size=4",
    "--sample_batch=4", "--max_in_flight=4", "--num_actors=2", "--critic=shared", "--max_new_tokens=24",
    "--max_prompt_tokens=1536", "--checkpoint_every=2", "--warm_pool=false",
    "--tensorboard=true", "--actor_lr=1e-3", "--critic_lr=1e-3",
]


def _env(cache):
    env = dict(os.environ, MLE_RL_CACHE=str(cache), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env


def _descendants(pid: int) -> set:
    """All live descendants of `pid` (from /proc)."""
    parents = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _start(args, cache, **kw):
    return subprocess.Popen([sys.executable, str(ROOT / "experiments" / "run.py"), *COMMON, *args],
                            cwd=ROOT, env=_env(cache), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def _watch(proc, until=None, timeout=400):
    """Wait for `proc` (or for `until()` to hold), recording its descendants meanwhile."""
    seen = set()
    t0 = time.time()
    while proc.poll() is None and time.time() - t0 < timeout:
        seen |= _descendants(proc.pid)
        if until is not None and until():
            break
        time.sleep(0.2)
    return seen


def _metrics(workdir):
    f = pathlib.Path(workdir) / "metrics.jsonl"
    return [json.loads(l) for l in f.read_text().splitlines()] if f.exists() else []


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_run_finishes_with_metrics_tensorboard_checkpoint_and_no_orphans(tmp_path, cache):
    wd = tmp_path / "run"
    proc = _start(["--max_steps=3", f"--workdir={wd}"], cache)
    seen = _watch(proc)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out[-3000:]
    rows = _metrics(wd)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("reward_mean", "valid_frac", "duration_mean_s", "clip_frac", "kl_ref",
                "staleness_mean", "learner_busy_frac"):
        assert key in rows[0], key
    assert rows[0]["valid_frac"] == 0.0 and rows[0]["reward_mean"] == -10.0
    # the trainer's memory per update; its parameters, optimiser state and sampler copy
    # stay referenced and nothing else piles up from one update to the next
    assert all(r["mem/rss_mb"] > 0 and r["mem/jax_live_mb"] > 0 for r in rows)
    assert rows[-1]["mem/jax_live_arrays"] == rows[1]["mem/jax_live_arrays"]
    # the shapes each update padded to, within the flags' budgets
    assert all(0 < r["padded_prompt_tokens"] <= 1536 and 0 < r["padded_response_tokens"] <= 24
               for r in rows), [(r["padded_prompt_tokens"], r["padded_response_tokens"]) for r in rows]
    # the trainer's RSS at each stage of its start: loading and building only add to it
    summary = json.loads((wd / "summary.json").read_text())
    stages = summary["memory_stages_mb"]
    assert list(stages) == ["start", "policy_loaded", "learner_built", "first_sample"]
    assert 0 < stages["start"]["rss_mb"] <= stages["first_sample"]["peak_rss_mb"]
    assert stages["first_sample"]["peak_rss_mb"] <= max(r["mem/peak_rss_mb"] for r in rows)
    assert list((wd / "tb").rglob("events.out.tfevents.*"))
    assert (wd / "checkpoints").is_dir() and any((wd / "checkpoints").iterdir())
    assert (wd / "policy" / "config.json").is_file()
    assert (wd / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((wd / "summary.json").read_text())["updates"] == 3
    assert len(seen) >= 2                     # the actors really were child processes
    time.sleep(1.0)
    assert not [p for p in seen if _alive(p)], "processes left behind"


@pytest.mark.slow
def test_kill9_then_resume_continues_at_the_saved_step(tmp_path, cache):
    """Out of CI for its time (~35 s on 2 cores): CI's kill -9 and resume of run.py is
    tests/test_crash_safety.py's `killed_mid_save` (killed while a save is in flight, no
    process or sandbox left, resumed at the latest step with no gap in the metrics)."""
    wd = tmp_path / "run"
    proc = _start(["--max_steps=50", f"--workdir={wd}"], cache)
    seen = _watch(proc, until=lambda: len(_metrics(wd)) >= 3)
    proc.kill()                                   # kill -9
    proc.communicate(timeout=30)
    time.sleep(1.5)
    assert not [p for p in seen if _alive(p)], "actors outlived a kill -9 of the trainer"
    from mle_rl.io.checkpoint import Checkpointer
    saved = Checkpointer(wd / "checkpoints").latest_step()
    assert saved is not None and saved >= 2
    proc = _start(["--max_steps=" + str(saved + 2), f"--workdir={wd}", "--resume"], cache)
    out = proc.communicate(timeout=400)[0]
    assert proc.returncode == 0, out[-3000:]
    assert f"continuing at update {saved}" in out
    steps = [r["step"] for r in _metrics(wd)]
    assert steps == list(range(1, saved + 3))     # truncated at the resume point, no gaps


def test_sigint_saves_a_checkpoint_and_exits_cleanly(tmp_path, cache):
    wd = tmp_path / "run"
    proc = _start(["--max_steps=50", "--checkpoint_every=1000", f"--workdir={wd}"], cache)
    seen = _watch(proc, until=lambda: len(_metrics(wd)) >= 1)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, out[-3000:]
    assert "SIGINT" in out
    from mle_rl.io.checkpoint import Checkpointer
    last = Checkpointer(wd / "checkpoints").latest_step()
    assert last == _metrics(wd)[-1]["step"]
    time.sleep(1.0)
    assert not [p for p in seen if _alive(p)]


def test_resume_restores_state_archive_and_rng_exactly(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("MLE_RL_CACHE", str(cache))
    from mle_rl.agent.trainer import Trainer
    cfg = _config(tmp_path / "run", max_steps=2)
    a = Trainer(cfg, log=lambda *_: None)
    # A solution in the archive (the random policy finds none itself); saved at the end.
    a.archive.add(a.tasks[TASK], plan="p", code="print(1)", output="out", score=0.9)
    a.run()
    b = Trainer(_config(tmp_path / "run", max_steps=4, resume=True), log=lambda *_: None)
    assert b.step == a.step == 2
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)),
                 a.learner.state, b.learner.state)
    assert b.archive.state_dict() == a.archive.state_dict()
    assert b.rng.bit_generator.state == a.rng.bit_generator.state
    np.testing.assert_array_equal(a.sample_key, b.sample_key)
    assert b.counters == a.counters


def _config(workdir, **over):
    config.define_flags()
    argv = ["x", *COMMON, f"--workdir={workdir}"] + [f"--{k}={v}" for k, v in over.items()]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(argv)
    return config.from_flags(flags.FLAGS)


@pytest.mark.parametrize("bad, message", [
    (["--batch_size=6", "--minibatches=4"], "not divisible by --minibatches"),
    (["--self_improve=1.5"], "--self_improve must be in"),
    (["--num_processes=2"], "--coordinator_address"),
    (["--temperature=0"], "--temperature must be > 0"),
    (["--best_of_k_mean_coef=1.5"], "--best_of_k_mean_coef must be in"),
    (["--best_of_k_valid_coef=-0.1"], "--best_of_k_valid_coef must be finite and >= 0"),
    (["--best_of_k_valid_coef=inf"], "--best_of_k_valid_coef must be finite and >= 0"),
])
def test_contradictory_settings_fail_with_one_line(tmp_path, bad, message):
    with pytest.raises(config.ConfigError, match=message):
        _config(tmp_path, **dict(a[2:].split("=", 1) for a in bad))


def test_cli_errors_are_one_clear_line(tmp_path, cache):
    r = subprocess.run([sys.executable, "experiments/run.py", "--no_such_flag=1",
                        f"--workdir={tmp_path}"], cwd=ROOT, env=_env(cache), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "no_such_flag" in r.stderr
    r = subprocess.run([sys.executable, "experiments/run.py", *COMMON, "--tasks=no-such-task",
                        f"--workdir={tmp_path}"], cwd=ROOT, env=_env(cache), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("error:") and "no-such-task" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "experiments/run.py", *COMMON, "--max_steps=abc",
                        f"--workdir={tmp_path}"], cwd=ROOT, env=_env(cache), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "max_steps" in r.stderr


@pytest.mark.slow
def test_same_run_on_one_device_and_on_a_2x2_mesh_of_4_cpu_devices(tmp_path, cache):
    """The trainer runs unchanged on 4 forced CPU devices with a (data 2, model 2) mesh.
    Slow (two whole runs, ~100 s on 2 slow cores; launch/slow_tests.sh runs it): CI checks
    the sharded update in process (test_learner's one device vs a 2x2 mesh) and two
    processes' global batch (test_distributed)."""
    out = {}
    for name, devices, mesh in (("one", 1, []), ("four", 4, ["--mesh_shape=2,2"])):
        wd = tmp_path / name
        env = _env(cache)
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "experiments" / "run.py"), *COMMON, "--max_steps=2",
             "--num_actors=1", f"--workdir={wd}", *mesh], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = proc.communicate(timeout=400)[0]
        assert proc.returncode == 0, log[-3000:]
        out[name] = _metrics(wd)
        cfg = json.loads((wd / "config.json").read_text())
        assert cfg["mesh_shape"] == ([2, 2] if mesh else None)
    for name in out:
        assert [r["step"] for r in out[name]] == [1, 2]
        assert all(np.isfinite(r["pg_loss"]) and np.isfinite(r["vf_loss"]) for r in out[name])
    # Same seed and same (failing) actions: the first update sees the same batch, so its
    # losses agree across the two device layouts.
    np.testing.assert_allclose(out["one"][0]["vf_loss"], out["four"][0]["vf_loss"], atol=1e-4)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _two_processes(wd, cache, extra=(), n=2):
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, str(ROOT / "experiments" / "run.py"), *COMMON, "--num_actors=1",
         f"--workdir={wd}", f"--coordinator_address=localhost:{port}", f"--num_processes={n}",
         f"--process_id={i}", *extra], cwd=ROOT, env=_env(cache), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for i in range(n)]
    logs = [p.communicate(timeout=400)[0] for p in procs]
    return [p.returncode for p in procs], logs


@pytest.mark.slow
def test_two_processes_on_localhost_train_checkpoint_and_resume_together(tmp_path, cache):
    """The same program as 2 processes (jax.distributed over gloo, 1 CPU device each, one
    global mesh): both reach the step limit in lockstep, process 0 alone writes the metrics,
    one checkpoint holds both processes' host state, and both resume from it. Slow (five
    starts of run.py, ~160 s on 2 slow cores; launch/slow_tests.sh runs it): CI checks the
    same resume, host state and refusal after a kill -9 (test_peer_loss)."""
    wd = tmp_path / "mh"
    codes, logs = _two_processes(wd, cache, ["--max_steps=2"])
    assert codes == [0, 0], "\n\n".join(l[-2500:] for l in logs)
    assert "done: process 1: 2 updates" in logs[1]
    rows = _metrics(wd)
    assert [r["step"] for r in rows] == [1, 2]
    # Each update saw batch_size rollouts: 2 from each process.
    assert all(0.0 <= r["valid_frac"] <= 1.0 and np.isfinite(r["reward_mean"]) for r in rows)
    from mle_rl.io import checkpoint as ckpt
    extra = ckpt.Checkpointer(wd / "checkpoints").read_extra()
    assert len(extra["hosts"]) == 2
    assert extra["hosts"][0]["host_rng"] != extra["hosts"][1]["host_rng"]
    assert (wd / "policy" / "config.json").is_file()

    codes, logs = _two_processes(wd, cache, ["--max_steps=3", "--resume"])
    assert codes == [0, 0], "\n\n".join(l[-2500:] for l in logs)
    assert "[resume] continuing at update 2" in logs[0] and "[resume] continuing at update 2" in logs[1]
    assert [r["step"] for r in _metrics(wd)] == [1, 2, 3]

    # A one-process resume of a two-process checkpoint is refused, with the reason.
    r = subprocess.run([sys.executable, "experiments/run.py", *COMMON, "--max_steps=4",
                        "--resume", f"--workdir={wd}"], cwd=ROOT, env=_env(cache),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--num_processes" in r.stderr, r.stderr[-2000:]


def _nan_trainer(tmp_path, cache, monkeypatch, nan_every, **over):
    monkeypatch.setenv("MLE_RL_CACHE", str(cache))
    from mle_rl.agent.trainer import Trainer
    from tests import actor_work
    cfg = _config(tmp_path / "run", **over)
    logs = []
    return Trainer(cfg, log=logs.append, work_fn=f"{actor_work.__name__}:nan_reward_work",
                   work_kwargs={"nan_every": nan_every}), logs


def test_a_nan_reward_is_skipped_and_the_run_continues(tmp_path, cache, monkeypatch):
    """One NaN reward in four: the update that sees it is skipped (the learner keeps its
    parameters), counted in the metrics, and training goes on to the step limit."""
    trainer, logs = _nan_trainer(tmp_path, cache, monkeypatch, nan_every=4, max_steps=3,
                                 max_skipped_updates=5)
    summary = trainer.run()
    assert summary["updates"] == 3
    rows = _metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["nonfinite_skips"] == 1 for r in rows)       # each batch held one NaN reward
    assert rows[-1]["skipped_updates"] == 3 and any("not finite" in l for l in logs)
    leaves = jax.tree.leaves(jax.tree.map(np.asarray, trainer.learner.state.policy))
    assert all(np.isfinite(x).all() for x in leaves)


def test_consecutive_non_finite_updates_stop_with_a_message_and_a_valid_checkpoint(
        tmp_path, cache, monkeypatch):
    from mle_rl.agent.update_guard import TrainingDiverged
    from mle_rl.io.checkpoint import Checkpointer
    trainer, _ = _nan_trainer(tmp_path, cache, monkeypatch, nan_every=1, max_steps=50,
                              max_skipped_updates=2, advantage="grpo", group_size=2)
    initial = jax.tree.map(np.asarray, trainer.learner.state.policy)
    with pytest.raises(TrainingDiverged, match="2 consecutive updates .* not finite"):
        trainer.run()
    wd = tmp_path / "run"
    assert [r["step"] for r in _metrics(wd)] == [1, 2]
    ck = Checkpointer(wd / "checkpoints")
    assert ck.latest_step() == 2 and ck.verify(2) == 2         # complete, checksums pass
    state, _ = ck.restore(2, abstract_state=trainer.learner.state)
    assert state.critic is None                                # GRPO: no critic saved
    jax.tree.map(np.testing.assert_array_equal, initial,
                 jax.tree.map(np.asarray, state.policy))       # never corrupted


@pytest.mark.parametrize("bad, message", [
    (["--advantage=grpo"], "--group_size >= 2"),
    (["--group_size=3"], "multiple of --group_size=3"),
    (["--group_size=8", "--batch_size=8", "--max_in_flight=4"], "--max_in_flight=4 must be"),
    (["--clip_ratio_c=0.5"], "--clip_ratio_c must be > 1"),
    (["--kl_ctrl=adaptive", "--kl_coef=0"], "--kl_ctrl=adaptive needs"),
    (["--advantage=max_at_k", "--group_size=2", "--best_of_k_scale=scores", "--grpo_std=false"],
     "contradicts --nogrpo_std"),
])
def test_learner_flag_contradictions_fail_with_one_line(tmp_path, bad, message):
    with pytest.raises(config.ConfigError, match=message):
        _config(tmp_path, **dict(a[2:].split("=", 1) for a in bad))


def test_learner_flags_reach_the_ppo_config(tmp_path):
    cfg = _config(tmp_path, advantage="rloo", group_size=2, clip_ratio_c=0, kl_ctrl="adaptive",
                  use_kl_loss="true", reduction="seq_mean_token_sum_norm", max_new_tokens=24)
    ppo = cfg.ppo
    assert ppo.advantage == "rloo" and ppo.critic_free and cfg.buffer.group_size == 2
    assert ppo.clip_ratio_c is None and ppo.kl_ctrl == "adaptive" and ppo.use_kl_loss
    assert ppo.loss_scale_factor == 24.0                       # the response budget
    default = _config(tmp_path)
    assert default.ppo.clip_ratio_c == 3.0 and default.ppo.advantage == "gae"


def test_resume_config_check_knows_the_settings_that_shape_the_state():
    from mle_rl.io import checkpoint_format as fmt
    now = _config("/tmp/x").to_dict()
    old = {k: dict(v) if isinstance(v, dict) else v for k, v in now.items()}
    for part, key in (("ppo", "advantage"), ("ppo", "kl_ctrl"), ("buffer", "group_size")):
        del old[part][key]                                     # a checkpoint from before them
    assert fmt.compatible(config.with_added_defaults(old), now, config.RESUME_MUST_MATCH).ok
    grpo = dict(now, ppo=dict(now["ppo"], advantage="grpo"))
    diff = fmt.compatible(now, grpo, config.RESUME_MUST_MATCH)
    assert [p for p, *_ in diff.incompatible] == ["ppo.advantage"]
    for key, value in (("group_size", 2), ("batch_size", 8)):   # the buffer's host state
        other = dict(now, buffer=dict(now["buffer"], **{key: value}))
        diff = fmt.compatible(now, other, config.RESUME_MUST_MATCH)
        assert [p for p, *_ in diff.incompatible] == [f"buffer.{key}"]
    fine = dict(now, ppo=dict(now["ppo"], clip_ratio_c=None, kl_loss_coef=0.1))
    assert fmt.compatible(now, fine, config.RESUME_MUST_MATCH).ok


def test_paper_flagfiles_state_the_learner_choices(tmp_path):
    """Each paper flagfile parses, and sets verl's PPO where the paper is silent."""
    config.define_flags()
    for path in sorted((ROOT / "experiments" / "paper").glob("*.flags")):
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["x", f"--flagfile={path}", f"--workdir={tmp_path}"])
        ppo = config.from_flags(flags.FLAGS).ppo
        assert (ppo.advantage, ppo.lam, ppo.kl_coef, ppo.clip_ratio_c, ppo.value_clip_eps,
                ppo.weight_decay, ppo.reduction) == ("gae", 1.0, 0.0, 3.0, 0.5, 0.01,
                                                     "token_mean"), path.name


def test_default_flagfile_parses_to_the_tuned_learner(tmp_path):
    """experiments/tabular.flags (the README's main job) is a valid config: critic-free
    max@k over whole groups, its best-of-k term on the update's scale of valid scores
    (session 58), failures counted on their own scale, the KL to the SFT policy as a loss
    and none in the reward."""
    config.define_flags()
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["x", f"--flagfile={ROOT / 'experiments' / 'tabular.flags'}",
                 f"--workdir={tmp_path}"])
    cfg = config.from_flags(flags.FLAGS)
    assert cfg.ppo.advantage == "max_at_k" and cfg.ppo.critic_free
    assert cfg.buffer.batch_size % cfg.buffer.group_size == 0 and cfg.buffer.group_size > 1
    assert cfg.ppo.best_of_k <= cfg.buffer.group_size
    assert cfg.ppo.best_of_k_scale == "scores" and cfg.ppo.best_of_k_valid_coef == 0.3
    assert "valid" in cfg.ppo.batch_keys
    assert cfg.ppo.kl_coef == 0.0 and cfg.ppo.use_kl_loss and cfg.ppo.kl_loss_coef > 0


def test_best_of_k_mean_coef_reaches_the_learner(tmp_path):
    assert _config(tmp_path, best_of_k_mean_coef=0.25).ppo.best_of_k_mean_coef == 0.25


def test_best_of_k_scale_reaches_the_learner_and_asks_for_valid(tmp_path):
    """--best_of_k_scale=scores divides by the spread of the batch's valid scores: the
    learner asks the batch for `valid` even without a validity term."""
    ppo = _config(tmp_path, advantage="max_at_k", group_size=4, best_of_k_scale="scores").ppo
    assert ppo.best_of_k_scale == "scores" and "valid" in ppo.batch_keys
    assert _config(tmp_path, advantage="max_at_k", group_size=4).ppo.best_of_k_scale == "group"


def test_best_of_k_valid_coef_runs_through_the_loop(tmp_path, cache, monkeypatch):
    """--best_of_k_valid_coef: the learner asks the batch for `valid` (collate's column),
    and updates on groups that mix failures with valid programs."""
    monkeypatch.setenv("MLE_RL_CACHE", str(cache))
    from mle_rl.agent.trainer import Trainer
    from tests import actor_work
    cfg = _config(tmp_path / "run", max_steps=2, advantage="max_at_k", group_size=4,
                  best_of_k=4, kl_coef=0.0, best_of_k_valid_coef=0.25)
    assert cfg.ppo.best_of_k_valid_coef == 0.25 and "valid" in cfg.ppo.batch_keys
    assert "valid" not in _config(tmp_path / "other", advantage="max_at_k",
                                  group_size=4).ppo.batch_keys
    trainer = Trainer(cfg, log=lambda *_: None,
                      work_fn=f"{actor_work.__name__}:scored_or_failed_work")
    assert trainer.run()["updates"] == 2
    rows = _metrics(tmp_path / "run")
    assert any(r["valid_frac"] < 1.0 for r in rows)
    assert all(r["nonfinite_skips"] == 0 for r in rows)
    assert any(r["adv_zero_frac"] < 1.0 for r in rows)


def test_grpo_batches_hold_whole_groups_of_one_prompt(tmp_path, cache, monkeypatch):
    """--group_size=2 through the asynchronous loop: every batch the learner sees is whole
    groups, each group two samples of one prompt at one policy version; no critic exists."""
    trainer, _ = _nan_trainer(tmp_path, cache, monkeypatch, nan_every=0, max_steps=2,
                              advantage="grpo", group_size=2, kl_coef=0.0)
    seen, take = [], trainer.buffer.take
    trainer.buffer.take = lambda n, v: seen.append(take(n, v)) or seen[-1]
    assert trainer.run()["updates"] == 2 and trainer.learner.state.critic is None
    for batch in seen:
        groups = {}
        for r in batch:
            groups.setdefault(r.group_id, []).append(r)
        assert sorted(len(g) for g in groups.values()) == [2, 2]
        for a, b in groups.values():
            assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
            assert a.policy_version == b.policy_version
    rows = _metrics(tmp_path / "run")
    assert "vf_loss" not in rows[0] and rows[0]["nonfinite_skips"] == 0
    assert rows[0]["adv_zero_frac"] == 1.0             # equal rewards in a group: no signal


def test_max_at_k_run_logs_valid_scores_and_programs_per_hour(tmp_path, cache, monkeypatch):
    """--advantage=max_at_k through the loop: groups with varied scores carry a signal; each
    metrics row has the mean score of the batch's valid programs, the summary the
    programs executed per hour."""
    monkeypatch.setenv("MLE_RL_CACHE", str(cache))
    from mle_rl.agent.trainer import Trainer
    from tests import actor_work
    cfg = _config(tmp_path / "run", max_steps=2, advantage="max_at_k", group_size=4,
                  best_of_k=2, kl_coef=0.0)
    trainer = Trainer(cfg, log=lambda *_: None, work_fn=f"{actor_work.__name__}:scored_work")
    summary = trainer.run()
    assert summary["updates"] == 2 and trainer.learner.state.critic is None
    assert summary["programs_per_hour"] > 0
    rows = _metrics(tmp_path / "run")
    for r in rows:
        assert 0.0 <= r["score_mean_valid"] <= 0.4 and r["valid_frac"] == 1.0
        assert r["score_mean_valid"] == r[f"score_mean_valid/{TASK}"]
        # the credit per family: every family of the batch has its mean advantage, weight
        # and weight x advantage; the duration weights average 1 over the batch
        fams = [k.split("/", 1)[1] for k in r if k.startswith("family/")]
        assert fams and all(f"{q}/{f}" in r for f in fams
                            for q in ("advantage", "weight", "credit"))
        assert sum(r[f"family/{f}"] * r[f"weight/{f}"] for f in fams) == pytest.approx(1.0)
    assert any(r["adv_zero_frac"] < 1.0 for r in rows)

