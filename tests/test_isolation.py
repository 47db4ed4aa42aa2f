"""The sandbox fails closed: without working bubblewrap nothing runs unless the caller opts
in with `--sandbox=unsafe`, and even then the program is not root and cannot read the
answers. Every entry point (`exec`, run.py, evaluate.py, warm_start.py) refuses with one
line and exit 2 before any program runs.

"No bubblewrap" is made real by a PATH without it (or with a `bwrap` that cannot create
namespaces), in a subprocess, so these tests mean the same on a machine with and without
bubblewrap installed.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from mle_rl.env import isolation

REPO = pathlib.Path(__file__).resolve().parents[1]
STDLIB_PYTHON = "/usr/bin/python3"


def _fake_path(tmp_path, bwrap: str = None) -> str:
    """A PATH dir with no bubblewrap, or with a `bwrap` script that fails like a host
    that denies user namespaces."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if bwrap is not None:
        fake = bin_dir / "bwrap"
        fake.write_text(f"#!/bin/sh\necho '{bwrap}' >&2\nexit 1\n")
        fake.chmod(0o755)
    return str(bin_dir)


def _env(tmp_path, path: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MLE_RL_SANDBOX"}
    env.update(PATH=path, PYTHONPATH=str(REPO), MLE_RL_CACHE=str(tmp_path / "cache"),
               JAX_PLATFORMS="cpu", TMPDIR=str(tmp_path), **extra)
    return env


def _marker_program(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    marker = tmp_path / "the_program_ran"
    code = tmp_path / "prog.py"
    code.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return code, marker


BWRAP_DENIED = "bwrap: No permissions to create new namespace"


@pytest.mark.parametrize("bwrap", [None, BWRAP_DENIED], ids=["missing", "unusable"])
def test_exec_refuses_without_bubblewrap(tmp_path, bwrap):
    code, marker = _marker_program(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "mle_rl", "exec", "--task", "tabular-synth",
                           "--code", str(code)], capture_output=True, text=True, timeout=300,
                          env=_env(tmp_path, _fake_path(tmp_path, bwrap)), cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "launch/setup.sh" in lines[0] and "--sandbox=unsafe" in lines[0]
    assert ("not installed" if bwrap is None else "No permissions") in lines[0]
    assert "error" in json.loads(proc.stdout)
    assert not marker.exists(), "a program ran without isolation"


@pytest.mark.parametrize("app, args", [
    ("experiments/run.py", ["--policy_dir=random", "--max_steps=1"]),
    ("experiments/evaluate.py", ["--policy_dir=random", "--n=1"]),
    ("experiments/warm_start.py", ["--n_per_task=1", "--eval_samples=0"]),
], ids=["run", "evaluate", "warm_start"])
def test_apps_refuse_without_bubblewrap(tmp_path, app, args):
    proc = subprocess.run([sys.executable, app, f"--workdir={tmp_path / 'run'}", *args]
                          if app.endswith("run.py") else [sys.executable, app, *args],
                          capture_output=True, text=True, timeout=300,
                          env=_env(tmp_path, _fake_path(tmp_path)), cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "bubblewrap (bwrap) is not installed" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache" / "policies").exists(), "the warm start began anyway"


def test_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv("MLE_RL_SANDBOX", "fallback")
    with pytest.raises(isolation.SandboxUnavailable, match="not a sandbox mode"):
        isolation.require()


@pytest.mark.skipif(os.geteuid() == 0, reason="as root the unsafe opt-in can drop to its own uid")
def test_unsafe_refused_without_root(monkeypatch):
    monkeypatch.setenv("MLE_RL_SANDBOX", "unsafe")
    with pytest.raises(isolation.SandboxUnavailable, match="needs root"):
        isolation.require()


def test_unsafe_refused_when_python_is_out_of_an_unprivileged_uid_reach(monkeypatch):
    from mle_rl.env import sandbox_fs

    monkeypatch.setenv("MLE_RL_SANDBOX", "unsafe")
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sandbox_fs, "world_reachable", lambda p: False)
    isolation._check.cache_clear()
    try:
        with pytest.raises(isolation.SandboxUnavailable, match="cannot reach the Python"):
            isolation.require()
    finally:
        isolation._check.cache_clear()


# ------------------------------------------------------------------ the unsafe opt-in, real

# Runs with the system's stdlib-only Python (world-readable, unlike a venv under a 0700
# home), so that the unprivileged uid can run it: the sandbox modules are stdlib only.
UNSAFE_DRIVER = r"""
import json, os, pathlib, sys
sys.path.insert(0, sys.argv[1])
from mle_rl.env import sandbox
task = pathlib.Path(sys.argv[2])
answers = task / "private" / "answers.csv"
probe = '''
import os, json, socket
out = {"uid": os.getuid(), "read": [], "wrote": [], "net": False}
for p in (%r, %r):
    try:
        open(p).read() if p.endswith(".csv") else os.listdir(p)
        out["read"].append(p)
    except OSError:
        pass
for p in ("/etc/mle_rl_escaped", "/root/mle_rl_escaped"):
    try:
        open(p, "w").write("x"); out["wrote"].append(p)
    except OSError:
        pass
try:
    socket.create_connection(("1.1.1.1", 80), timeout=1); out["net"] = True
except OSError:
    pass
print(json.dumps(out))
''' % (str(answers), str(answers.parent))
res = sandbox.run_program(probe, task / "public", timeout_s=30, memory_mb=512)
slow = sandbox.run_program("import time; time.sleep(60)", task / "public", timeout_s=1,
                           memory_mb=512)
sandbox.remove_workdir(res.workdir); sandbox.remove_workdir(slow.workdir)
try:
    os.chmod(task / "private", 0o755)
    sandbox.run_program("print(1)", task / "public", timeout_s=5, memory_mb=512)
    refused = ""
except sandbox.SandboxUnavailable as e:
    refused = str(e)
print(json.dumps({"status": res.status, "stdout": res.stdout_tail, "err": res.stderr_tail,
                  "slow": slow.status, "refused": refused}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the unsafe opt-in needs root (refused otherwise: "
                    "test_unsafe_refused_without_root)")
@pytest.mark.skipif(not os.access(STDLIB_PYTHON, os.X_OK), reason=f"no {STDLIB_PYTHON}")
def test_unsafe_opt_in_drops_root_hides_answers_and_network(tmp_path):
    base = pathlib.Path(tempfile.mkdtemp())     # under /tmp: every parent world-traversable
    try:
        os.chmod(base, 0o755)
        task = base / "t"
        (task / "public").mkdir(parents=True)
        (task / "private").mkdir(mode=0o700)
        (task / "public" / "train.csv").write_text("id,y\n1,0\n")
        (task / "private" / "answers.csv").write_text("id,y\n1,SECRET\n")
        os.chmod(task / "private", 0o700)
        proc = subprocess.run([STDLIB_PYTHON, "-c", UNSAFE_DRIVER, str(REPO), str(task)],
                              capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "MLE_RL_SANDBOX": "unsafe",
                                   "TMPDIR": str(base)})
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["status"] == "ok", out["err"]
        seen = json.loads(out["stdout"].strip().splitlines()[-1])
        assert seen["uid"] != 0
        assert seen["read"] == [] and seen["wrote"] == [] and seen["net"] is False
        assert "SECRET" not in out["stdout"] + out["err"]
        assert out["slow"] == "timeout"
        assert "chmod 700" in out["refused"]
        assert not pathlib.Path("/etc/mle_rl_escaped").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("bwrap", ["host", None, BWRAP_DENIED], ids=["host", "missing", "unusable"])
def test_setup_script_checks_that_bwrap_really_works(tmp_path, bwrap):
    assert "\ncheck_bwrap" in (REPO / "launch" / "setup.sh").read_text()
    path = os.environ["PATH"] if bwrap == "host" else _fake_path(tmp_path, bwrap)
    result = subprocess.run(["/bin/bash", "-c", "source launch/lib.sh && check_bwrap"],
                            capture_output=True, text=True, cwd=REPO, timeout=60,
                            env={**os.environ, "PATH": path})
    said = result.stdout + result.stderr
    if bwrap == "host":
        works = isolation.mode() == "bwrap" and shutil.which("bwrap") is not None
        assert (result.returncode == 0) == works, said
        assert ("bubblewrap works" if works else "bubblewrap") in said
    else:
        assert result.returncode == 1, said
        assert ("NOT installed" if bwrap is None else "cannot create its sandbox") in said
