"""A dead process in a two-process run (`--num_processes=2` on localhost, jax.distributed over
gloo): kill -9 of one process while it samples, while it updates and while it writes a
checkpoint (`MLE_RL_KILL_AT`, runtime/peers.py). The other process exits within a bounded
time with one line naming the lost one; no process or sandbox is left behind; a `--resume`
of both continues from the last checkpoint that both finished."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMON = ["--tasks=breast-cancer-diagnosis", "--policy_dir=random", "--model_preset=micro",
          "--batch_size=4", "--sample_batch=4", "--max_in_flight=4", "--num_actors=1",
          "--critic=shared", "--max_new_tokens=24", "--max_prompt_tokens=1536",
          "--checkpoint_every=2", "--warm_pool=false", "--tensorboard=false",
          "--peer_timeout_s=15"]
BOUND_S = 120          # the bound on how long a survivor may take


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(wd, cache, extra=(), kill_at=None):
    port = _free_port()
    env = dict(os.environ, MLE_RL_CACHE=str(cache), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    if kill_at:
        env["MLE_RL_KILL_AT"] = kill_at
    return [subprocess.Popen(
        [sys.executable, str(ROOT / "experiments" / "run.py"), *COMMON, f"--workdir={wd}",
         f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}",
         *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for i in range(2)]


def _leftovers(wd) -> list:
    """run.py processes of this workdir, or their actors, still alive."""
    out = subprocess.run(["pgrep", "-af", str(wd)], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if "pgrep" not in l]


def _killed_run(wd, cache, victim, phase, step):
    procs = _start(wd, cache, ["--max_steps=8"], kill_at=f"{victim}:{phase}:{step}")
    dead, alive = procs[victim], procs[1 - victim]
    dead.wait(timeout=600)
    assert dead.returncode == -9, dead.stderr.read()[-2000:]          # it did die there
    t0 = time.time()
    out, err = alive.communicate(timeout=BOUND_S + 60)
    took = time.time() - t0
    lines = [l for l in err.strip().splitlines() if l.startswith("error: ")]
    assert took < BOUND_S, (took, err[-2000:])
    assert len(lines) == 1 and f"process {victim} of 2" in lines[0], err[-3000:]
    assert "Traceback" not in err and "Check failure" not in err, err[-3000:]
    assert alive.returncode != 0
    deadline = time.time() + 30
    while _leftovers(wd):
        assert time.time() < deadline, _leftovers(wd)
        time.sleep(0.5)
    while _orphan_sandboxes():                 # the janitor removes a dead actor's dirs
        assert time.time() < deadline, _orphan_sandboxes()
        time.sleep(0.5)
    return lines[0]


def _orphan_sandboxes() -> list:
    """Sandbox roots (TMPDIR/mle_rl_<pid>_*) whose process is gone."""
    out = []
    for d in pathlib.Path(os.environ.get("TMPDIR", "/tmp")).glob("mle_rl_*_*"):
        pid = d.name.split("_")[2]
        if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
            out.append(d)
    return out


def _committed(wd) -> list:
    d = pathlib.Path(wd) / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def test_a_process_killed_in_an_update_stops_the_other_and_both_resume(tmp_path):
    wd = tmp_path / "run"
    line = _killed_run(wd, tmp_path / "cache", victim=1, phase="update", step=3)
    assert _committed(wd) == [2] and "from checkpoint 2" in line
    procs = _start(wd, tmp_path / "cache", ["--max_steps=4", "--resume"])
    logs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(e[-2000:] for _, e in logs)
    rows = [json.loads(l) for l in (wd / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]            # continued from checkpoint 2
    # Both resumed from the one checkpoint, which holds each process's own host state; the
    # metrics above are process 0's alone (one row per update).
    text = ["".join(log) for log in logs]
    assert all("[resume] continuing at update 2" in t for t in text), text[0][-2000:]
    assert "done: process 1:" in text[1], text[1][-2000:]
    from mle_rl.io import checkpoint as ckpt
    hosts = ckpt.Checkpointer(wd / "checkpoints").read_extra()["hosts"]
    assert len(hosts) == 2 and hosts[0]["host_rng"] != hosts[1]["host_rng"]
    assert (wd / "policy" / "config.json").is_file()
    # A one-process resume of a two-process checkpoint is refused, with the reason.
    env = dict(os.environ, MLE_RL_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    one = subprocess.run([sys.executable, str(ROOT / "experiments" / "run.py"), *COMMON,
                          f"--workdir={wd}", "--max_steps=5", "--resume"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 2 and "--num_processes" in one.stderr, one.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("victim, phase, step", [(0, "sample", 3), (1, "checkpoint", 4),
                                                 (0, "checkpoint", 4), (0, "update", 2)])
def test_a_process_killed_anywhere_stops_the_other(tmp_path, victim, phase, step):
    wd = tmp_path / "run"
    line = _killed_run(wd, tmp_path / "cache", victim, phase, step)
    steps = _committed(wd)
    assert all(s < step or (phase != "checkpoint" and s <= step) for s in steps)
    if steps:
        assert f"from checkpoint {steps[-1]}" in line
