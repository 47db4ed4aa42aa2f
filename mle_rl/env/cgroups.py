"""Memory and process-count limits for one sandbox, from a cgroup of its own.

`RLIMIT_AS` caps *virtual* memory per process: torch, lightgbm and JAX reserve far more
address space than they touch and fail under it, and a program's children each get a
fresh budget. A cgroup caps what the whole process tree really uses:

  cgroup v2  `memory.max`, `memory.swap.max = 0`, `pids.max`; the kernel's verdict is
             `oom_kill` in `memory.events`.
  cgroup v1  `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, so no swap) in
             the memory hierarchy, `pids.max` in the pids hierarchy; the verdict is
             `oom_kill` in `memory.oom_control`.

`detect()` finds which one this process may use: a cgroup it can create children in,
under its own cgroup, with the memory and pids controllers, checked by really creating
(and removing) one. Where neither is writable it returns None and the sandbox falls
back to rlimits (and says so). `MLE_RL_CGROUP=off` forces that fallback.

A sandbox's process joins its cgroup before it execs anything (`join_argv` wraps the
command in `sh`, which writes its own pid into the cgroup and then execs), so every
process the program starts is counted and limited. Names carry the owner's pid
(`mle_rl_<pid>_<n>`), so `sweep_stale()` can remove the ones a killed process left.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
import pathlib
import signal
import time
from typing import Optional

log = logging.getLogger(__name__)

PREFIX = "mle_rl_"
_counter = itertools.count()


def _own_paths() -> dict:
    """{controller or "": path} from /proc/self/cgroup ("" is the v2 unified entry)."""
    out = {}
    for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _mounts() -> dict:
    """{"v2": mount point, "memory": v1 mount, "pids": v1 mount} from /proc/self/mountinfo."""
    out = {}
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        point, fstype, options = fields[4], rfields[0], rfields[2].split(",")
        if fstype == "cgroup2":
            out.setdefault("v2", point)
        elif fstype == "cgroup":
            for c in ("memory", "pids"):
                if c in options:
                    out.setdefault(c, point)
    return out


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where this process makes its sandboxes' cgroups.

    version: 2 or 1. parents: {"memory": dir, "pids": dir} (the same dir under v2).
    """

    version: int
    parents: tuple  # ((controller, parent dir), ...)

    @property
    def name(self) -> str:
        return f"cgroup-v{self.version}"

    def parent(self, controller: str) -> pathlib.Path:
        return pathlib.Path(dict(self.parents)[controller])


class Cgroup:
    """One sandbox's cgroup (one dir under v2; a memory and a pids dir under v1)."""

    def __init__(self, backend: Backend, name: Optional[str] = None):
        self.backend = backend
        self.name = name or f"{PREFIX}{os.getpid()}_{next(_counter)}"
        self.dirs = []
        for controller in ("memory", "pids"):
            d = backend.parent(controller) / self.name
            if d not in self.dirs:
                d.mkdir()
                self.dirs.append(d)

    @property
    def procs_files(self) -> list:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def _file(self, controller: str, name: str) -> pathlib.Path:
        return self.backend.parent(controller) / self.name / name

    def set_limits(self, memory_mb: int, max_procs: int) -> None:
        """Caps the whole tree's memory (no swap) and process/thread count."""
        nbytes = str(int(memory_mb) * 2**20)
        if self.backend.version == 2:
            self._file("memory", "memory.max").write_text(nbytes)
            swap = self._file("memory", "memory.swap.max")
            if swap.exists():
                swap.write_text("0")
        else:
            memsw = self._file("memory", "memory.memsw.limit_in_bytes")
            # memsw (memory + swap) must stay >= the memory limit: when lowering, lower the
            # memory limit first; when raising, raise memsw first.
            current = int(self._file("memory", "memory.limit_in_bytes").read_text())
            order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
            if int(nbytes) > current:
                order.reverse()
            for name in order:
                if name == "memory.memsw.limit_in_bytes" and not memsw.exists():
                    continue
                self._file("memory", name).write_text(nbytes)
        self._file("pids", "pids.max").write_text(str(int(max_procs)))

    def oom_kills(self) -> int:
        """How many processes the kernel killed for this cgroup's memory limit."""
        name = "memory.events" if self.backend.version == 2 else "memory.oom_control"
        try:
            for line in self._file("memory", name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list:
        out = set()
        for f in self.procs_files:
            try:
                out.update(int(p) for p in pathlib.Path(f).read_text().split())
            except OSError:
                pass
        return sorted(out)

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILLs every process in the cgroup; True once it is empty."""
        return kill_and_remove([str(d) for d in self.dirs], timeout_s=timeout_s, remove=False)

    def remove(self) -> None:
        """Kills what is left inside and removes the cgroup (idempotent)."""
        kill_and_remove([str(d) for d in self.dirs])


def kill_and_remove(dirs, timeout_s: float = 5.0, remove: bool = True) -> bool:
    """Empties cgroup dirs by SIGKILL (stdlib only: the janitor calls it), then rmdirs them.

    Returns True when every dir ended empty (and removed, with `remove`).
    """
    deadline = time.monotonic() + timeout_s
    ok = True
    for d in dirs:
        d = pathlib.Path(d)
        if not d.is_dir():
            continue
        kill = d / "cgroup.kill"
        while True:
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            if not pids:
                break
            if kill.exists():
                try:
                    kill.write_text("1")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                ok = False
                break
            time.sleep(0.02)
        if remove:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # the last exits are still being accounted for
                    time.sleep(0.02)
            else:
                ok = False
    return ok


def join_argv(cgroup: Optional[Cgroup], argv: list) -> list:
    """`argv`, started so that it runs inside `cgroup` from its first instruction."""
    if cgroup is None:
        return argv
    files = cgroup.procs_files
    script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; '
              'n=$((n-1)); done; exec "$@"')
    return ["/bin/sh", "-c", script, "sh", str(len(files)), *files, *argv]


def _v2_parent(mounts: dict, own: dict) -> Optional[pathlib.Path]:
    if "v2" not in mounts or "" not in own:
        return None
    parent = pathlib.Path(mounts["v2"]) / own[""].lstrip("/")
    try:
        available = (parent / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(available):
            return None
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= enabled:
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return None
    return parent


def _v1_parents(mounts: dict, own: dict) -> Optional[dict]:
    out = {}
    for c in ("memory", "pids"):
        if c not in mounts or c not in own:
            return None
        out[c] = str(pathlib.Path(mounts[c]) / own[c].lstrip("/"))
    return out


def _probe(backend: Backend) -> bool:
    """Really makes a cgroup, sets limits on it and removes it."""
    try:
        cg = Cgroup(backend, f"{PREFIX}{os.getpid()}_probe{next(_counter)}")
    except OSError:
        return False
    try:
        cg.set_limits(256, 16)
        return True
    except OSError:
        return False
    finally:
        cg.remove()


@functools.lru_cache(maxsize=1)
def detect() -> Optional[Backend]:
    """The cgroup backend this process can use for sandboxes, or None (rlimits only)."""
    if os.environ.get("MLE_RL_CGROUP", "").lower() in ("off", "0", "no", "false"):
        return None
    try:
        mounts, own = _mounts(), _own_paths()
    except OSError:
        return None
    parent = _v2_parent(mounts, own)
    if parent is not None:
        backend = Backend(2, (("memory", str(parent)), ("pids", str(parent))))
        if _probe(backend):
            return backend
    parents = _v1_parents(mounts, own)
    if parents is not None:
        backend = Backend(1, tuple(sorted(parents.items())))
        if _probe(backend):
            return backend
    return None


def sweep_stale(backend: Optional[Backend]) -> int:
    """Removes sandbox cgroups whose owner process no longer exists; returns how many."""
    if backend is None:
        return 0
    n = 0
    for parent in {p for _, p in backend.parents}:
        for d in pathlib.Path(parent).glob(f"{PREFIX}*_*"):
            pid = d.name[len(PREFIX):].split("_", 1)[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                kill_and_remove([d])
                n += 1
    return n
