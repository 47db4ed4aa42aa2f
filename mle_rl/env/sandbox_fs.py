"""What a sandboxed program sees: the bubblewrap command line, its environment, and its
working directory (made before, removed after, whatever the program did to it).

The program's view: `/usr`, `/etc` and the Python installation and venv read-only (only
those directories, never a parent such as `/work` or `/root`), `/proc` of its own PID
namespace, a minimal `/dev`, small private `/tmp` and `/dev/shm`, its working directory
at `/job` (cwd, writable) and the task's `public/` at `/job/input` (read-only).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import tempfile
from typing import Optional, Sequence

from mle_rl.env import janitor

SANDBOX_CWD = "/job"
TMPFS_BYTES = 256 * 2**20
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")


def python_roots() -> list[str]:
    """Directories the sandboxed Python needs, read-only: its installation and the venv."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    for p in sys.path:
        rp = os.path.realpath(p) if p else ""
        if rp.endswith("site-packages") and not any(rp.startswith(r + os.sep) for r in roots):
            roots.add(rp)
    return sorted(roots)


def check_not_above(private_dirs: Sequence[pathlib.Path], binds: Sequence[str]) -> None:
    for priv in private_dirs:
        rp = os.path.realpath(priv)
        for b in binds:
            if rp == b or rp.startswith(b.rstrip(os.sep) + os.sep):
                raise ValueError(f"Refusing to sandbox: {b} would expose the private dir {rp}; "
                                 "keep the task cache outside the Python installation.")


def bwrap_path() -> Optional[str]:
    """bubblewrap's absolute path on this process's PATH (programs get a PATH of their own,
    so the command line names the binary the isolation check found), or None."""
    return shutil.which("bwrap")


def bwrap_command(workdir: pathlib.Path, public_dir: pathlib.Path) -> list[str]:
    cmd = [bwrap_path() or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:  # keep only what the bootstrap needs to drop to its own uid
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user"]
    for d in ("/usr", "/etc"):
        cmd += ["--ro-bind", d, d]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(d):
            cmd += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            cmd += ["--ro-bind", d, d]
    # The fresh /tmp comes before the Python binds, so a venv that lives under /tmp (a CI
    # checkout, say) is mounted on top of it instead of being hidden by it.
    cmd += ["--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
            "--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm"]
    roots = python_roots()
    check_not_above([public_dir.parent / "private"], roots)
    made = set()
    for r in roots:  # bwrap makes missing parents 0700; make them traversable
        parts = pathlib.PurePosixPath(r).parts
        for i in range(2, len(parts)):
            parent = str(pathlib.PurePosixPath(*parts[:i]))
            if parent not in made and parent not in ("/usr", "/etc", "/tmp", "/dev"):
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", r, r]
    cmd += ["--bind", str(workdir), SANDBOX_CWD,
            "--ro-bind", str(public_dir), f"{SANDBOX_CWD}/input",
            "--chdir", SANDBOX_CWD]
    return cmd


def sandbox_env(env_threads: int, cwd: str) -> dict:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": cwd, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "PYTHONIOENCODING": "utf-8"}
    env.update({k: str(env_threads) for k in THREAD_VARS})
    return env


WORKDIR_PREFIX = "job_"


def make_workdir(workdir: Optional[pathlib.Path], uid: Optional[int]) -> pathlib.Path:
    """`workdir`, or a fresh dir under this process's janitor-watched temp root (removed
    even if the process is killed), with an `input/` mount point, owned by `uid`."""
    if workdir is None:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=janitor.temp_root()))
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "input").mkdir(exist_ok=True)
    if uid is not None:
        os.chown(workdir, uid, uid)
    os.chmod(workdir, 0o711)  # bwrap, capability-free, must still enter it
    return workdir


def world_reachable(path: pathlib.Path) -> bool:
    return all(os.stat(d).st_mode & 0o001 for d in [path, *path.parents])


def expose_public(public_dir: pathlib.Path, dest: pathlib.Path) -> None:
    """Fallback mode: `dest` -> public_dir as a link, or a world-readable copy when the
    dropped uid could not reach it (e.g. a task cache under a 0700 home)."""
    dest.rmdir()
    if world_reachable(public_dir):
        dest.symlink_to(public_dir)
        return
    shutil.copytree(public_dir, dest)
    for d, dirs, files in os.walk(dest):
        os.chmod(d, 0o555)
        for f in files:
            os.chmod(os.path.join(d, f), 0o444)


def sweep_stale_workdirs() -> int:
    """Deletes temp roots (and the older `mle_rl_job_<pid>_*` work dirs) of processes that
    no longer exist, in case a janitor itself was killed; returns how many."""
    n = 0
    for d in pathlib.Path(tempfile.gettempdir()).glob("mle_rl_*_*"):
        rest = d.name[len("mle_rl_"):]
        rest = rest[len("job_"):] if rest.startswith("job_") else rest
        pid = rest.split("_", 1)[0]
        if d.is_dir() and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            janitor.remove_workdir(d)
            n += 1
    return n
