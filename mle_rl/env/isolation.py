"""Which isolation untrusted programs get, and refusing to run when there is none.

Two modes, chosen by `MLE_RL_SANDBOX` (the `--sandbox` flag of every entry point sets it,
so actor processes inherit it):

  bwrap   (the default) bubblewrap: own mount, PID, network, IPC and UTS namespaces, a
          read-only system, only `public/` and a fresh work dir visible. If bubblewrap is
          missing or cannot create its namespaces here, nothing runs: `require()` raises
          `SandboxUnavailable` with one line naming the fix, before any program starts.
  unsafe  an explicit opt-in to run WITHOUT a file-system sandbox: rlimits/cgroup limits,
          no network and an own PID namespace (`unshare`), and the program runs as a
          separate unprivileged uid, so it is never root and cannot read the answers
          (private dirs are 0700, owned by the host user; a private dir the uid could read
          is refused). It can still read world-readable host files and write to
          world-writable dirs such as /tmp: use it only on a throw-away machine. Without
          root (no uid to drop to) it is refused too, since the program would run as the
          owner of the answers.

Memory is limited by a cgroup where one is writable (`cgroups.detect`), else by rlimits;
`describe()` says which (the CLI prints it with every `exec`).
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys
import tempfile

from mle_rl.env import cgroups, sandbox_fs

MODES = ("bwrap", "unsafe")
FIX = ("install bubblewrap (`bash launch/setup.sh`, or `apt-get install bubblewrap`), or "
       "opt in to running generated code without isolation with --sandbox=unsafe "
       "(MLE_RL_SANDBOX=unsafe)")


class SandboxUnavailable(RuntimeError):
    """No isolation this process may use; the message is one line naming the fix."""


def mode() -> str:
    """The requested mode; raises SandboxUnavailable for an unknown value."""
    value = os.environ.get("MLE_RL_SANDBOX", "").strip().lower() or "bwrap"
    if value not in MODES:
        raise SandboxUnavailable(f"MLE_RL_SANDBOX={value!r} is not a sandbox mode; use one of "
                                 f"{', '.join(MODES)}.")
    return value


def set_mode(value: str) -> None:
    """Sets the mode for this process and the processes it starts (the `--sandbox` flag)."""
    if value not in MODES:
        raise SandboxUnavailable(f"--sandbox={value!r} is not a sandbox mode; use one of "
                                 f"{', '.join(MODES)}.")
    os.environ["MLE_RL_SANDBOX"] = value
    _check.cache_clear()


@functools.lru_cache(maxsize=4)
def _check(value: str) -> None:
    if value == "bwrap":
        _probe_bwrap()
    else:
        _check_unsafe()


def _probe_bwrap() -> None:
    """Runs `python -c pass` under the exact bubblewrap command programs get."""
    if sandbox_fs.bwrap_path() is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed, so generated code "
                                 f"cannot be isolated; {FIX}.")
    with tempfile.TemporaryDirectory(prefix="mle_rl_probe_") as tmp:
        work, public = pathlib.Path(tmp, "work"), pathlib.Path(tmp, "public")
        (work / "input").mkdir(parents=True)
        public.mkdir()
        os.chmod(work, 0o711)
        cmd = sandbox_fs.bwrap_command(work, public) + [sys.executable, "-c", "pass"]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=60,
                                  env=sandbox_fs.sandbox_env(1, sandbox_fs.SANDBOX_CWD))
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SandboxUnavailable(f"bubblewrap could not be started ({e}); {FIX}.") from None
    if proc.returncode != 0:
        why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise SandboxUnavailable(f"bubblewrap is installed but cannot create its sandbox here "
                                 f"({why[:200]}; user namespaces denied?); {FIX}.")


def _check_unsafe() -> None:
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "--sandbox=unsafe needs root, to run programs as a separate uid that cannot read "
            "the answers; install bubblewrap instead (`bash launch/setup.sh`).")
    blocked = [r for r in sandbox_fs.python_roots()
               if not sandbox_fs.world_reachable(pathlib.Path(r))]
    if blocked:
        raise SandboxUnavailable(
            f"--sandbox=unsafe runs programs as an unprivileged uid, which cannot reach the "
            f"Python installation at {blocked[0]} (a 0700 parent dir); install bubblewrap "
            "(`bash launch/setup.sh`) or use a world-readable Python.")


def require() -> str:
    """The mode in use, after checking it really works; raises SandboxUnavailable."""
    value = mode()
    _check(value)
    return value


def check_private_hidden(private_dir: pathlib.Path) -> None:
    """Unsafe mode: refuses a private dir that an unprivileged uid could read."""
    private_dir = pathlib.Path(private_dir)
    if not private_dir.exists():
        return
    st = os.stat(private_dir)
    if st.st_mode & 0o005 and sandbox_fs.world_reachable(private_dir.parent):
        raise SandboxUnavailable(
            f"the answers in {private_dir} are readable by other users, and --sandbox=unsafe "
            f"cannot hide them from the program; run `chmod 700 {private_dir}` or use "
            "bubblewrap.")


def describe() -> dict:
    """{"isolation": "bwrap" | "unsafe", "memory": "cgroup-v2" | "cgroup-v1" | "rlimit"}."""
    backend = cgroups.detect()
    return {"isolation": mode(), "memory": backend.name if backend else "rlimit"}
