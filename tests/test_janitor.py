"""Nothing a sandboxing process made outlives it, however it ends: its janitor kills what
is left in its cgroups and deletes its temp root (every work dir) on a clean exit and
after SIGKILL alike."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests._tiny_task import make_tiny_task

REPO = pathlib.Path(__file__).resolve().parents[1]

OWNER = r"""
import json, os, pathlib, signal, sys, time
sys.path.insert(0, sys.argv[1])
from mle_rl.env import janitor, warm_pool
pool = warm_pool.WarmPool(size=2, public_dir=pathlib.Path(sys.argv[2]))
assert pool.wait_ready(pathlib.Path(sys.argv[2]))
boxes = [b for q in pool._ready.values() for b in q]
print(json.dumps({"root": str(janitor.temp_root()),
                  "workdirs": [str(b.workdir) for b in boxes],
                  "cgroups": [str(d) for b in boxes if b.cgroup for d in b.cgroup.dirs],
                  "pids": [b.proc.pid for b in boxes]}), flush=True)
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(0)   # a clean exit that runs no cleanup at all (no atexit, no close)
"""


def _gone(paths, pids, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        left = [p for p in paths if os.path.exists(p)]
        if not alive and not left:
            return [], []
        time.sleep(0.1)
    return left, alive


@pytest.mark.parametrize("end", ["kill", "exit"])
def test_owner_death_leaves_nothing_behind(tmp_path, end):
    task = make_tiny_task(tmp_path)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", OWNER, str(REPO), str(task.public_dir), end],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == (-signal.SIGKILL if end == "kill" else 0), proc.stderr
    made = json.loads(proc.stdout.strip().splitlines()[-1])
    assert pathlib.Path(made["root"]).parent == tmp_path
    assert all(w.startswith(made["root"]) for w in made["workdirs"])
    left, alive = _gone([made["root"], *made["cgroups"]], made["pids"])
    assert left == [] and alive == [], f"left behind: {left}, still running: {alive}"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("mle_rl_")] == []
