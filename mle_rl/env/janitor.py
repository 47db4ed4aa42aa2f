"""Cleans up after a process that runs sandboxes, however that process ends.

A process killed with SIGKILL runs no cleanup code, and actors are killed that way. So
the first time a process needs a sandbox directory it starts a janitor: a small Python
process in a session of its own, holding the read end of a pipe whose write end only the
owner has. The owner registers what would outlive it: one private temp root (every
sandbox work dir and submission copy of this process lives under it), each sandbox's
cgroup, and (without bubblewrap) each uid its programs ran as. When the pipe reaches EOF,
because the owner exited cleanly or was killed, the janitor kills whatever is still
running in those cgroups or as those uids, removes the cgroups and deletes the temp root,
then exits.

    root = janitor.temp_root()          # TMPDIR/mle_rl_<pid>_<random>/, made once per pid
    janitor.register("cgroup", path)    # killed and removed when this process is gone
    janitor.register("uid", 200_013)

stdlib only (with `cgroups`, itself stdlib only).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Optional

ROOT_PREFIX = "mle_rl_"
_lock = threading.Lock()
_state: dict = {}   # pid -> (root, write fd): a forked child gets its own


def _start(root: pathlib.Path) -> int:
    """Starts the janitor for `root`; returns the write end of its pipe."""
    r, w = os.pipe()
    package_parent = str(pathlib.Path(__file__).resolve().parents[2])
    code = (f"import sys; sys.path.insert(0, {package_parent!r}); "
            "from mle_rl.env import janitor; janitor.main()")
    subprocess.Popen([sys.executable, "-c", code, str(root)], stdin=r,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)
    os.close(r)
    os.set_inheritable(w, False)
    return w


def temp_root() -> pathlib.Path:
    """This process's private temp root, watched by its janitor (both made on first use)."""
    pid = os.getpid()
    with _lock:
        if pid not in _state:
            root = pathlib.Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{pid}_"))
            os.chmod(root, 0o711)  # sandbox uids enter their own work dir, list nothing
            _state[pid] = (root, _start(root))
        return _state[pid][0]


def register(kind: str, value) -> None:
    """Tells the janitor about a cgroup dir ("cgroup") or a uid ("uid") to clean up."""
    temp_root()
    line = f"{kind} {value}\n".encode()
    with _lock:
        try:
            os.write(_state[os.getpid()][1], line)
        except OSError:  # the janitor is gone: the stale sweep of the next run remains
            pass


def kill_uid(uid: int) -> None:
    """SIGKILLs every process running as `uid` (unsafe mode's sweep), until none is left."""
    import signal
    import time

    for _ in range(5):
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    found = True
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        if not found:
            return
        time.sleep(0.05)


def remove_workdir(workdir: pathlib.Path) -> None:
    """Deletes a working directory even if the program changed its permissions."""

    def fix(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
            func(path)
        except OSError:
            pass

    try:
        os.chmod(workdir, 0o700)
    except OSError:
        pass
    shutil.rmtree(workdir, onerror=fix)


def clean(root: Optional[pathlib.Path], cgroup_dirs, uids) -> None:
    """Kills what the owner left running and deletes what it left on disk."""
    from mle_rl.env import cgroups

    for uid in uids:
        kill_uid(uid)
    cgroups.kill_and_remove([d for d in cgroup_dirs if os.path.isdir(d)])
    for uid in uids:  # a process may have forked between the first sweep and its death
        kill_uid(uid)
    if root is not None and root.exists():
        remove_workdir(root)


def main() -> None:
    """The janitor process: reads registrations until EOF, then cleans."""
    root = pathlib.Path(sys.argv[1])
    cgroup_dirs, uids = [], set()
    buf = b""
    while True:
        try:
            chunk = os.read(0, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            kind, _, value = line.decode(errors="replace").partition(" ")
            if kind == "cgroup":
                cgroup_dirs.append(value)
            elif kind == "uid" and value.isdigit():
                uids.add(int(value))
    clean(root, cgroup_dirs, sorted(uids))
