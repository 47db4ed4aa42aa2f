"""Runs one untrusted Python program in a sandbox: bubblewrap, a cgroup, a wall clock.

Inside the sandbox the program sees a fresh writable working directory as its cwd
(`/job`), the task's `public/` read-only at `/job/input/`, a read-only system and Python,
a small private `/tmp`, no network, its own PID namespace, and nothing else of the host
(no `/work`, no `$HOME`, no task cache, so never `private/`). It runs as an unprivileged
uid with no capabilities. Limits: wall time (the whole namespace is killed), memory and
process count of the whole process tree (a cgroup of its own, `cgroups.py`; rlimits
where no cgroup is writable), CPU time, file size; stdout/stderr are read as they come
and only the tail is kept.

The sandbox fails closed (`isolation.py`): without working bubblewrap nothing runs unless
the caller opted in with `MLE_RL_SANDBOX=unsafe`, and even then the program runs as its
own uid, which cannot read the answers.

Every program is started by the same bootstrap (`sandbox_boot.py`): the host writes one
header line of limits and then the code to its stdin. A `WarmPool` (`warm_pool.py`)
starts those bootstraps ahead of time with numpy/pandas/scikit-learn already imported, so
an action does not pay the imports; each warm sandbox serves exactly one program.

The verdicts come from what the host saw, never from what the program printed: "oom"
only when the kernel killed a process for the cgroup's memory limit, "timeout" only when
the wall clock ran out (or the CPU limit's signal came no sooner than it could have).
Work dirs and cgroups live under this process's janitor (`janitor.py`), so they go away
even when the process is killed with SIGKILL.

Δt (`duration_s`) is the program's own wall time: from the moment its code is handed to
the (already started) interpreter until it exits.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import pathlib
import select
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence

from mle_rl.env import cgroups, isolation, janitor, sandbox_fs
from mle_rl.env.isolation import SandboxUnavailable  # noqa: F401 (re-export)
from mle_rl.env.output_tail import Tail
from mle_rl.env.janitor import remove_workdir  # noqa: F401 (re-export)
from mle_rl.env.sandbox_fs import SANDBOX_CWD  # noqa: F401 (re-export)

log = logging.getLogger(__name__)

BOOT_FILE = pathlib.Path(__file__).with_name("sandbox_boot.py")
DEFAULT_MAX_FILE_MB = 1024
DEFAULT_MAX_PROCS = 64
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
READY_TIMEOUT_S = 60.0
# A warm sandbox's memory cap while it waits for its program (the run sets the real one).
WAITING_MEMORY_MB = 2048
# The host uids programs run as (when the host is root): each process cycles through
# UIDS_PER_PROCESS uids of its own block (picked by pid), so concurrent sandboxes have
# distinct uids and RLIMIT_NPROC counts only a sandbox's own processes.
UID_BASE, UID_BLOCKS, UIDS_PER_PROCESS = 200_000, 5_000, 10
_MEMORY_HINTS = ("MemoryError", "Unable to allocate", "Cannot allocate memory", "bad_alloc")
_uid_counter = itertools.count()
_said = set()


@dataclasses.dataclass
class SandboxResult:
    """How one program ended.

    status: "ok" (exit 0) | "error" | "timeout" (wall or CPU limit) | "oom" (the cgroup's
    memory limit). duration_s: the program's own wall time (Δt). stdout_tail/stderr_tail:
    the last `max_output_bytes` of each stream, decoded as UTF-8 with replacement.
    """

    returncode: Optional[int]
    status: str
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    workdir: pathlib.Path
    message: str = ""
    watched: tuple = ()   # stdout lines starting with `watch`, from anywhere in the stream


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-program limits: the cgroup's (memory, processes) and the bootstrap's rlimits."""

    timeout_s: float
    memory_mb: int
    cpu_s: Optional[float] = None
    max_file_mb: int = DEFAULT_MAX_FILE_MB
    max_procs: int = DEFAULT_MAX_PROCS
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES


def use_bwrap() -> bool:
    """True when programs run under bubblewrap (the default); False with the unsafe opt-in."""
    return isolation.mode() == "bwrap"


def _say_once(key: str, message: str, level=logging.WARNING) -> None:
    if key not in _said:
        _said.add(key)
        log.log(level, message)


def _next_uid() -> int:
    block = os.getpid() % UID_BLOCKS  # read at call time: correct after a fork
    return UID_BASE + block * UIDS_PER_PROCESS + next(_uid_counter) % UIDS_PER_PROCESS


def _make_cgroup(max_procs: int) -> Optional[cgroups.Cgroup]:
    backend = cgroups.detect()
    if backend is None:
        _say_once("rlimit", "no writable cgroup here: sandbox memory is limited per process "
                  "with RLIMIT_AS (virtual memory; children are not counted together).")
        return None
    _say_once("cgroup", f"sandbox memory and process limits: {backend.name}", logging.INFO)
    cg = cgroups.Cgroup(backend)
    for d in cg.dirs:
        janitor.register("cgroup", d)
    cg.set_limits(WAITING_MEMORY_MB, max_procs)
    return cg


class Sandbox:
    """One started bootstrap, waiting for its program; serves exactly one `run`.

    Raises SandboxUnavailable (before starting anything) when isolation is not available.
    """

    def __init__(self, public_dir: pathlib.Path, *, preload: Sequence[str] = (),
                 env_threads: int = 1, max_procs: int = DEFAULT_MAX_PROCS,
                 workdir: Optional[pathlib.Path] = None):
        self.public_dir = pathlib.Path(public_dir).resolve()
        if not self.public_dir.is_dir():
            raise FileNotFoundError(f"The task's public dir {self.public_dir} does not exist; "
                                    "prepare the task first.")
        self.bwrap = isolation.require() == "bwrap"
        root = os.geteuid() == 0
        if not self.bwrap:
            isolation.check_private_hidden(self.public_dir.parent / "private")
            _say_once("unsafe", "MLE_RL_SANDBOX=unsafe: programs run WITHOUT a file-system "
                      "sandbox (own uid, no network, answers unreadable).")
        self.uid = _next_uid() if root else None
        if self.uid is not None and not self.bwrap:
            janitor.register("uid", self.uid)
        self.workdir = sandbox_fs.make_workdir(workdir, self.uid)
        self.cgroup = None
        try:
            self.cgroup = _make_cgroup(max_procs)
            if self.bwrap:
                cmd, cwd = sandbox_fs.bwrap_command(self.workdir, self.public_dir), SANDBOX_CWD
                popen_cwd = None
            else:
                sandbox_fs.expose_public(self.public_dir, self.workdir / "input")
                cmd = ["unshare", "--net", "--pid", "--fork", "--kill-child"]
                cwd = popen_cwd = str(self.workdir)
            self._start(cmd, cwd, popen_cwd, preload, env_threads, max_procs)
        except BaseException:
            self._release()
            janitor.remove_workdir(self.workdir)
            raise
        self.started = time.monotonic()

    def _start(self, cmd, cwd, popen_cwd, preload, env_threads, max_procs) -> None:
        ready_r, ready_w = os.pipe()
        # Programs never run as root: bwrap drops to self.uid, unsafe mode requires root
        # (isolation._check_unsafe) exactly so that the bootstrap can drop to it too.
        argv = [sys.executable, "-c", BOOT_FILE.read_text(), str(ready_w),
                str(self.uid if self.uid is not None else -1),
                str(max_procs + self._nproc_offset()), ",".join(preload)]
        try:
            self.proc = subprocess.Popen(
                cgroups.join_argv(self.cgroup, cmd + argv), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(ready_w,),
                cwd=popen_cwd, env=sandbox_fs.sandbox_env(env_threads, cwd),
                start_new_session=True)
        except OSError:
            os.close(ready_r)
            raise
        finally:
            os.close(ready_w)
        self._ready_r = ready_r
        self._ready = False
        self.out = Tail(os.dup(self.proc.stdout.fileno()), DEFAULT_MAX_OUTPUT_BYTES)
        self.err = Tail(os.dup(self.proc.stderr.fileno()), DEFAULT_MAX_OUTPUT_BYTES)
        self.proc.stdout.close()
        self.proc.stderr.close()

    def _nproc_offset(self) -> int:
        """RLIMIT_NPROC counts every process of the uid: without our own uid, allow for
        the ones the user already runs."""
        if self.uid is not None:
            return 0
        me = os.geteuid()
        n = 0
        for pid in os.listdir("/proc"):
            try:
                n += pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == me
            except OSError:
                pass
        return n

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Blocks until the interpreter has imported its preloads; False if it died."""
        if self._ready:
            return True
        r, _, _ = select.select([self._ready_r], [], [], timeout_s)
        ok = bool(r) and os.read(self._ready_r, 1) == b"R"
        self._ready = ok
        return ok

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _kill_tree(self) -> None:
        """SIGKILLs bwrap's process group (the PID namespace takes everything inside) and
        anything left in the cgroup or running as the program's uid."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("sandbox process %d did not die after SIGKILL", self.proc.pid)
        if self.cgroup is not None:
            self.cgroup.kill_all()
        if not self.bwrap and self.uid is not None:  # no mount namespace: sweep the uid
            janitor.kill_uid(self.uid)

    def _release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    def kill(self) -> None:
        """Kills the sandbox and everything it started; removes its cgroup."""
        if hasattr(self, "proc"):
            self._kill_tree()
        self._release()

    def close_ready(self) -> None:
        if self._ready_r >= 0:
            os.close(self._ready_r)
            self._ready_r = -1

    def close(self) -> None:
        """Kills the sandbox if still running and deletes its working directory."""
        self.kill()
        self.close_ready()
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        janitor.remove_workdir(self.workdir)

    def run(self, code: str, limits: Limits, watch: str = "") -> SandboxResult:
        """Hands `code` to the interpreter and waits for it under `limits`; stdout lines
        starting with `watch` (e.g. instrumentation markers) are kept wherever they are."""
        if not self.wait_ready():
            self.kill()
            return SandboxResult(None, "error", 0.0, self.out.text(), self.err.text(),
                                 self.workdir, "The sandbox failed to start: "
                                 + (self.err.text()[-500:] or "no output."))
        self.out.reset(limits.max_output_bytes, watch.encode())
        self.err.reset(limits.max_output_bytes)
        if self.cgroup is not None:
            self.cgroup.set_limits(limits.memory_mb, limits.max_procs)
        header = json.dumps({
            "memory_mb": None if self.cgroup is not None else limits.memory_mb,
            "cpu_s": limits.cpu_s, "max_file_mb": limits.max_file_mb,
            "max_procs": limits.max_procs + self._nproc_offset()})
        t0 = time.monotonic()
        try:
            self.proc.stdin.write(header.encode() + b"\n" + code.encode("utf-8", "surrogatepass"))
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        timed_out = False
        try:
            self.proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        duration = time.monotonic() - t0
        self._kill_tree()  # the program on a time-out; anything it left behind otherwise
        oom_kills = self.cgroup.oom_kills() if self.cgroup is not None else 0
        rlimit_memory = self.cgroup is None
        self._release()
        for t in (self.out, self.err):
            t.thread.join(timeout=5)
        res = _classify(self.proc.returncode, timed_out, oom_kills, duration,
                        self.out.text(), self.err.text(), self.workdir, limits, rlimit_memory)
        res.watched = tuple(self.out.watched)
        return res


def _classify(rc, timed_out, oom_kills, duration, out, err, workdir, limits: Limits,
              rlimit_memory: bool) -> SandboxResult:
    """The verdict, from what the host observed (exit status, cgroup events, wall clock).

    A CPU-limit signal counts as "timeout" only after at least `cpu_s` of wall time (a
    program that raises SIGXCPU itself sooner gets "error"; one that sleeps that long
    first gains nothing over sleeping into the wall-clock limit).
    """
    last = [ln for ln in err[-4000:].strip().splitlines() if ln.strip()]
    # A signal's death reads -N from Popen and 128+N through bwrap's or unshare's exit code.
    sig = -rc if rc is not None and rc < 0 else (rc - 128 if rc is not None and
                                                 128 < rc < 128 + 65 else None)
    cpu_spent = limits.cpu_s is not None and duration >= limits.cpu_s
    if timed_out:
        status, msg = "timeout", f"The program ran past the {limits.timeout_s:g} s time limit."
    elif rc == 0:
        status, msg = "ok", ""
    elif oom_kills:
        status, msg = "oom", (f"The program ran out of memory: the kernel killed it at the "
                              f"{limits.memory_mb} MB limit.")
    elif sig in (signal.SIGXCPU, signal.SIGKILL) and cpu_spent:
        status, msg = "timeout", f"The program used more than {limits.cpu_s:g} s of CPU time."
    else:
        status = "error"
        name = signal.Signals(sig).name if sig in signal.valid_signals() else None
        how = (f"was killed by signal {name}" if rc < 0 and name else
               f"failed with exit code {rc}" + (f" (128 + {name})" if name else ""))
        msg = f"The program {how}" + (f": {last[-1][:300]}" if last else ".")
        if rlimit_memory and any(h in ln for ln in last[-3:] for h in _MEMORY_HINTS):
            msg += (f" (It may have hit the {limits.memory_mb} MB address-space limit; without "
                    "a cgroup the sandbox cannot tell, so this counts as an error.)")
    return SandboxResult(rc, status, duration, out, err, workdir, msg)


def sweep_stale() -> int:
    """Removes work dirs and cgroups left by processes that no longer exist (a backstop
    for a janitor that was itself killed); returns how many."""
    return sandbox_fs.sweep_stale_workdirs() + cgroups.sweep_stale(cgroups.detect())


def run_program(code: str, public_dir: pathlib.Path, *, timeout_s: float, memory_mb: int,
                workdir: Optional[pathlib.Path] = None, cpu_s: Optional[float] = None,
                max_file_mb: int = DEFAULT_MAX_FILE_MB, max_procs: int = DEFAULT_MAX_PROCS,
                max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, env_threads: int = 1,
                pool=None, watch: str = "") -> SandboxResult:
    """Runs `code` once in a fresh sandbox that sees `public_dir` at `./input/`.

    Returns when the program has exited or was killed; nothing it started is left
    running. The caller owns `result.workdir` (read `submission.csv` there, then
    `remove_workdir`). With `pool` (a `WarmPool`) and no explicit `workdir`, a pre-started
    sandbox is used for this `public_dir` (its `env_threads` and `max_procs` are the
    pool's; `max_procs` here can only lower the latter). `watch`: a line prefix whose
    stdout lines are kept in `result.watched` even if they fall out of the tail.
    Raises SandboxUnavailable when there is no isolation to run it in.
    """
    limits = Limits(float(timeout_s), int(memory_mb), cpu_s, int(max_file_mb), int(max_procs),
                    int(max_output_bytes))
    box = None
    if pool is not None and workdir is None:
        box = pool.acquire(public_dir)
    if box is None:
        box = Sandbox(public_dir, env_threads=env_threads, max_procs=max_procs, workdir=workdir)
    try:
        return box.run(code, limits, watch)
    finally:
        box.kill()
        box.close_ready()

