"""Memory limits that real ML programs live with: a cgroup per sandbox caps what the whole
process tree really uses (not the virtual address space torch or JAX reserve), children
included, and "oom" is the kernel's verdict, never the program's own words."""

import pathlib
import textwrap

import pytest

from tests._tiny_task import make_tiny_task
from mle_rl.env import cgroups, isolation, rewards, sandbox

BACKEND = cgroups.detect()
pytestmark = pytest.mark.skipif(BACKEND is None, reason="no writable cgroup (v2 or v1 memory+pids) "
                                "on this machine: the sandbox uses rlimits and says so")


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return make_tiny_task(tmp_path_factory.mktemp("cgroup"))


def run(code, public_dir, **kw):
    kw.setdefault("timeout_s", 120)
    kw.setdefault("memory_mb", 4096)
    res = sandbox.run_program(textwrap.dedent(code), public_dir, **kw)
    sandbox.remove_workdir(res.workdir)
    return res


def test_backend_is_reported():
    assert isolation.describe()["memory"] == BACKEND.name


def test_torch_runs_under_4_gb(task):
    res = run("""
        import torch
        x = torch.randn(512, 512)
        print(float((x @ x).abs().sum()) > 0, torch.__version__)
    """, task.public_dir)
    assert res.status == "ok", res.stderr_tail
    assert res.stdout_tail.startswith("True")


def test_6_gb_under_4_gb_is_oom(task):
    res = run("""
        import numpy as np
        x = np.ones(6 * 2**30 // 8)   # 6 GB, every page touched
        print("survived", x[-1])
    """, task.public_dir)
    assert res.status == "oom", (res.status, res.message, res.stderr_tail[-300:])
    assert "survived" not in res.stdout_tail
    assert "4096 MB" in res.message


def test_a_child_process_cannot_escape_the_limit(task):
    # 2.5 GB here and 2.5 GB in a child: each under the limit, together over it.
    res = run("""
        import subprocess, sys
        import numpy as np
        mine = np.ones(5 * 2**29 // 8)
        child = "import numpy as np, time; y = np.ones(5 * 2**29 // 8); time.sleep(5)"
        subprocess.run([sys.executable, "-c", child], check=True)
        print("both fit")
    """, task.public_dir)
    assert res.status == "oom", (res.status, res.message, res.stderr_tail[-300:])
    assert "both fit" not in res.stdout_tail


@pytest.mark.parametrize("code", [
    "raise MemoryError()",
    "import sys\nprint('MemoryError: out of memory', file=sys.stderr)\nsys.exit(1)",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
], ids=["raise", "print", "sigkill-self"])
def test_a_program_cannot_claim_oom(task, code):
    res = run(code, task.public_dir)
    assert res.status == "error", res.status
    reward = rewards.compute_reward("mlagent", status=res.status, score=None,
                                    is_lower_better=False)
    assert reward == 0.0  # not the 0.5 of a real corner case


def _ours():
    return {d for _, p in BACKEND.parents for d in pathlib.Path(p).glob(f"{cgroups.PREFIX}*")}


def test_cgroup_is_removed_after_the_run(task):
    before = _ours()
    res = run("print('x')", task.public_dir)
    assert res.status == "ok"
    assert _ours() <= before
