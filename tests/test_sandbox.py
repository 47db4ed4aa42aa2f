"""The sandbox runs a program with the right view of the world, limits and output capture;
the warm pool serves pre-imported interpreters without weakening isolation; the fallback
without bubblewrap still applies the limits."""

import logging
import os
import sys
import pathlib
import textwrap

import psutil
import pytest

from tests._tiny_task import make_tiny_task
from mle_rl.env import cgroups, sandbox, sandbox_fs, warm_pool

BWRAP = sandbox.use_bwrap()
CGROUP = cgroups.detect() is not None


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return make_tiny_task(tmp_path_factory.mktemp("sandbox"))


def run(code, public_dir, **kw):
    kw.setdefault("timeout_s", 20)
    kw.setdefault("memory_mb", 2048)
    res = sandbox.run_program(textwrap.dedent(code), public_dir, **kw)
    sandbox.remove_workdir(res.workdir)
    return res


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap")
def test_program_sees_only_public_and_its_workdir(task):
    res = run("""
        import os, json
        print(json.dumps({
            "cwd": os.getcwd(), "input": sorted(os.listdir("input")),
            "root": sorted(os.listdir("/")),
            "work": os.listdir("/work") if os.path.isdir("/work") else [],
            "home": os.environ["HOME"], "uid": os.getuid(),
            "caps": open("/proc/self/status").read().split("CapEff:")[1].split()[0],
            "threads": os.environ["OMP_NUM_THREADS"], "nproc": len(os.listdir("/proc")),
        }))
        try:
            open("input/new.csv", "w")
            print("PUBLIC WRITABLE")
        except OSError:
            pass
        open("submission.csv", "w").write("ok")
    """, task.public_dir)
    assert res.status == "ok", res.stderr_tail
    import json
    seen = json.loads(res.stdout_tail.splitlines()[0])
    assert seen["cwd"] == sandbox.SANDBOX_CWD
    assert seen["input"] == ["sample_submission.csv", "test.csv", "train.csv"]
    assert "private" not in " ".join(seen["root"]) and "home" not in seen["root"]
    # /work shows at most the path down to the read-only venv (when the venv lives there).
    parts = pathlib.Path(os.path.realpath(sys.prefix)).parts
    venv_step = [parts[2]] if len(parts) > 2 and parts[1] == "work" else []
    assert seen["work"] in ([], venv_step)
    assert seen["home"] == sandbox.SANDBOX_CWD and seen["threads"] == "1"
    assert seen["caps"] == "0000000000000000"
    if os.geteuid() == 0:
        assert seen["uid"] != 0
    assert "PUBLIC WRITABLE" not in res.stdout_tail
    assert not (task.public_dir / "new.csv").exists()


def test_status_returncode_and_output(task):
    res = run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)",
              task.public_dir)
    assert (res.status, res.returncode) == ("error", 3)
    assert res.stdout_tail == "out\n" and res.stderr_tail == "err\n"
    assert "exit code 3" in res.message
    res = run("raise ValueError('boom')", task.public_dir)
    assert res.status == "error" and "ValueError: boom" in res.message


def test_output_keeps_the_tail(task):
    res = run("for i in range(100000):\n    print(i)", task.public_dir, max_output_bytes=1000)
    assert res.status == "ok"
    assert len(res.stdout_tail) <= 1000 and res.stdout_tail.endswith("99999\n")


def test_duration_is_the_programs_own_time(task):
    res = run("import time\ntime.sleep(0.5)", task.public_dir)
    assert res.status == "ok" and res.duration_s >= 0.5


def test_cpu_limit_is_a_timeout(task):
    res = run("while True:\n    pass", task.public_dir, timeout_s=30, cpu_s=1)
    assert res.status == "timeout" and "CPU" in res.message


def test_submission_stays_in_workdir(task):
    res = sandbox.run_program("open('submission.csv', 'w').write('id,y\\n')", task.public_dir,
                              timeout_s=20, memory_mb=2048)
    try:
        assert (res.workdir / "submission.csv").read_text() == "id,y\n"
    finally:
        sandbox.remove_workdir(res.workdir)
    assert not res.workdir.exists()


def test_missing_public_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="prepare the task"):
        sandbox.run_program("pass", tmp_path / "nope", timeout_s=5, memory_mb=512)


def test_refuses_a_bind_above_private():
    with pytest.raises(ValueError, match="private"):
        sandbox_fs.check_not_above([pathlib.Path("/opt/x/cache/t/private")], ["/opt/x"])
    sandbox_fs.check_not_above([pathlib.Path("/opt/xy/private")], ["/opt/x"])  # a sibling is fine


# ----------------------------------------------------------------------------- warm pool


def _alive(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_warm_pool_serves_preloaded_single_use_sandboxes(task):
    probe = """
        import os, sys, json
        print(json.dumps({"sklearn": "sklearn.ensemble" in sys.modules, "uid": os.getuid(),
                          "tmp": os.listdir("/tmp"), "cwd": sorted(os.listdir(".")),
                          "env": os.environ.get("LEAK")}))
        open("/tmp/leak", "w").write("x")
        open("leak.txt", "w").write("x")
        os.environ["LEAK"] = "1"
    """
    import json
    with warm_pool.WarmPool(size=1) as pool:
        first = run(probe, task.public_dir, pool=pool)
        second = run(probe, task.public_dir, pool=pool)
        boxes = [b for q in pool._ready.values() for b in q]
        assert pool.stats["served_warm"] == 2
    a, b = (json.loads(r.stdout_tail) for r in (first, second))
    assert a["sklearn"] and b["sklearn"]
    assert first.workdir != second.workdir
    # Nothing of the first action is visible to the second.
    parts = pathlib.Path(os.path.realpath(sys.prefix)).parts   # a venv under /tmp shows
    venv_step = {parts[2]} if len(parts) > 2 and parts[1] == "tmp" else set()  # its path
    assert "leak" not in b["tmp"] and set(b["tmp"]) <= venv_step
    assert b["cwd"] == ["input"] and b["env"] is None
    if os.geteuid() == 0 and BWRAP:
        assert a["uid"] != b["uid"]
    # close() killed the waiting sandboxes and deleted their working dirs.
    assert boxes and _alive([x.proc.pid for x in boxes]) == []
    assert not any(x.workdir.exists() for x in boxes)


def test_warm_pool_limits_still_apply(task):
    with warm_pool.WarmPool(size=1, public_dir=task.public_dir) as pool:
        # The run's own limit replaces the waiting sandbox's: 1.5 GB touched under 512 MB.
        res = run("import numpy as np\nx = np.ones(1536 * 2**20 // 8)", task.public_dir,
                  pool=pool, memory_mb=512)
        assert res.status == ("oom" if CGROUP else "error")
        res = run("import time\ntime.sleep(60)", task.public_dir, pool=pool, timeout_s=1)
        assert res.status == "timeout"


def test_warm_pool_replaces_a_dead_sandbox(task):
    with warm_pool.WarmPool(size=1, public_dir=task.public_dir) as pool:
        [box] = pool._ready[task.public_dir.resolve()]
        box.kill()
        res = run("print('fine')", task.public_dir, pool=pool)
        assert res.status == "ok" and res.stdout_tail == "fine\n"
        assert pool.stats["discarded"] == 1


def test_stale_workdirs_of_dead_processes_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox_fs.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = tmp_path / "mle_rl_999999999_abc"            # a temp root (janitor layout)
    legacy = tmp_path / "mle_rl_job_999999998_abc"      # a work dir of the older layout
    alive = tmp_path / f"mle_rl_{os.getpid()}_abc"
    for d in (dead, legacy, alive):
        (d / "job_x" / "input").mkdir(parents=True)
    os.chmod(dead / "job_x", 0)
    assert sandbox_fs.sweep_stale_workdirs() == 2
    assert not dead.exists() and not legacy.exists() and alive.exists()


def test_multiprocessing_with_the_programs_own_functions(task):
    res = run("""
        import multiprocessing as mp

        def square(x):
            return x * x

        if __name__ == "__main__":
            with mp.get_context("fork").Pool(2) as pool:
                print(sum(pool.map(square, range(10))))
    """, task.public_dir)
    assert res.status == "ok", res.stderr_tail
    assert res.stdout_tail.strip() == "285"
