"""Runs one untrusted Python program in a sandbox: bubblewrap, rlimits, a wall clock.

Inside the sandbox the program sees a fresh writable working directory as its cwd
(`/job`), the task's `public/` read-only at `/job/input/`, a read-only system and Python,
a small private `/tmp`, no network, its own PID namespace, and nothing else of the host
(no `/work`, no `$HOME`, no task cache, so never `private/`). It runs as an unprivileged
uid with no capabilities, so `RLIMIT_NPROC` contains fork bombs even when the host runs as
root. Limits: wall time (the whole namespace is killed), address space, CPU time, file
size, process count; stdout/stderr are read as they come and only the tail is kept.

Every program is started by the same bootstrap (`sandbox_boot.py`): the host writes one
header line of limits and then the code to its stdin. A `WarmPool` (`warm_pool.py`)
starts those bootstraps ahead of time with numpy/pandas/scikit-learn already imported, so
an action does not pay the imports; each warm sandbox serves exactly one program.

Where bubblewrap is missing (or `MLE_RL_SANDBOX=fallback`), programs run with the same
rlimits, in new network and PID namespaces (`unshare`) when root, dropping to their own
uid when the Python installation is world-readable, and a warning is logged once: the
file system is then NOT hidden (and without the uid drop a fork bomb is not capped).

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
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

from mle_rl.env import sandbox_fs
from mle_rl.env.sandbox_fs import SANDBOX_CWD, remove_workdir  # noqa: F401 (re-export)

log = logging.getLogger(__name__)

BOOT_FILE = pathlib.Path(__file__).with_name("sandbox_boot.py")
DEFAULT_MAX_FILE_MB = 1024
DEFAULT_MAX_PROCS = 64
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
READY_TIMEOUT_S = 60.0
# The host uids programs run as (when the host is root): each process cycles through
# UIDS_PER_PROCESS uids of its own block (picked by pid), so concurrent sandboxes have
# distinct uids and RLIMIT_NPROC counts only a sandbox's own processes.
UID_BASE, UID_BLOCKS, UIDS_PER_PROCESS = 200_000, 5_000, 10
_OOM_PATTERNS = ("MemoryError", "Unable to allocate", "Cannot allocate memory",
                 "std::bad_alloc", "out of memory")
_uid_counter = itertools.count()
_warned_fallback = False


@dataclasses.dataclass
class SandboxResult:
    """How one program ended.

    status: "ok" (exit 0) | "error" | "timeout" (wall or CPU limit) | "oom".
    duration_s: the program's own wall time (Δt). stdout_tail/stderr_tail: the last
    `max_output_bytes` of each stream, decoded as UTF-8 with replacement.
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
    """Per-program limits, sent to the bootstrap in the header line."""

    timeout_s: float
    memory_mb: int
    cpu_s: Optional[float] = None
    max_file_mb: int = DEFAULT_MAX_FILE_MB
    max_procs: int = DEFAULT_MAX_PROCS
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES


# ----------------------------------------------------------------------------- command


def use_bwrap() -> bool:
    """True when programs run under bubblewrap; False for the weaker fallback."""
    if os.environ.get("MLE_RL_SANDBOX", "").lower() == "fallback":
        return False
    return shutil.which("bwrap") is not None


def _warn_fallback_once() -> None:
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        log.warning("bubblewrap (bwrap) is not in use: programs run with rlimits%s only, and "
                    "can read the host file system; install bubblewrap for real isolation.",
                    " and no network" if os.geteuid() == 0 else "")


def _next_uid() -> int:
    block = os.getpid() % UID_BLOCKS  # read at call time: correct after a fork
    return UID_BASE + block * UIDS_PER_PROCESS + next(_uid_counter) % UIDS_PER_PROCESS


# ----------------------------------------------------------------------------- process


class _Tail:
    """Reads a pipe on a thread, keeping only the last `cap` bytes, and, whatever their
    position in the stream, the first `MAX_WATCHED` lines that start with `watch`."""

    MAX_WATCHED, LINE_CAP = 256, 4096

    def __init__(self, fd: int, cap: int):
        self.cap, self.buf, self.total = cap, bytearray(), 0
        self.watch, self.partial, self.watched = b"", b"", []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(fd,), daemon=True)
        self.thread.start()

    def _run(self, fd: int) -> None:
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                with self.lock:
                    self.total += len(chunk)
                    self.buf += chunk
                    if len(self.buf) > 2 * self.cap:
                        del self.buf[: len(self.buf) - self.cap]
                    if self.watch:
                        self._scan(chunk)
            with self.lock:
                if self.watch:
                    self._scan(b"\n")
        finally:
            os.close(fd)

    def _scan(self, chunk: bytes) -> None:
        data = self.partial + chunk
        nl = data.rfind(b"\n")
        if nl < 0:  # keep only a line's start: that is where a marker sits
            self.partial = data[: self.LINE_CAP]
            return
        complete, self.partial = data[:nl], data[nl + 1:][: self.LINE_CAP]
        if self.watch in complete:
            for line in complete.split(b"\n"):
                if line.startswith(self.watch) and len(self.watched) < self.MAX_WATCHED:
                    self.watched.append(line[:300].decode("utf-8", errors="replace"))

    def reset(self, cap: int, watch: bytes = b"") -> None:
        with self.lock:
            self.cap, self.buf, self.total = cap, bytearray(), 0
            self.watch, self.partial, self.watched = watch, b"", []

    def text(self) -> str:
        with self.lock:
            data = bytes(self.buf[-self.cap:]) if self.cap else b""
        return data.decode("utf-8", errors="replace")


class Sandbox:
    """One started bootstrap, waiting for its program; serves exactly one `run`."""

    def __init__(self, public_dir: pathlib.Path, *, preload: Sequence[str] = (),
                 env_threads: int = 1, max_procs: int = DEFAULT_MAX_PROCS,
                 workdir: Optional[pathlib.Path] = None):
        self.public_dir = pathlib.Path(public_dir).resolve()
        if not self.public_dir.is_dir():
            raise FileNotFoundError(f"The task's public dir {self.public_dir} does not exist; "
                                    "prepare the task first.")
        self.bwrap = use_bwrap()
        root = os.geteuid() == 0
        self.uid = _next_uid() if root else None
        self.workdir = sandbox_fs.make_workdir(workdir, self.uid)
        if self.bwrap:
            cmd, cwd = sandbox_fs.bwrap_command(self.workdir, self.public_dir), SANDBOX_CWD
            popen_cwd = None
        else:
            _warn_fallback_once()
            sandbox_fs.expose_public(self.public_dir, self.workdir / "input")
            # As root: no network, and a PID namespace that dies with `unshare`.
            cmd = (["unshare", "--net", "--pid", "--fork", "--kill-child"]
                   if root and shutil.which("unshare") else [])
            cwd = popen_cwd = str(self.workdir)
        self.drops_uid = self.uid is not None and self._can_drop()
        ready_r, ready_w = os.pipe()
        argv = [sys.executable, "-c", BOOT_FILE.read_text(), str(ready_w),
                str(self.uid if self.drops_uid else -1),
                str(max_procs + self._nproc_offset()), ",".join(preload)]
        try:
            self.proc = subprocess.Popen(
                cmd + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(ready_w,), cwd=popen_cwd,
                env=sandbox_fs.sandbox_env(env_threads, cwd), start_new_session=True)
        except OSError:
            os.close(ready_r)
            sandbox_fs.remove_workdir(self.workdir)
            raise
        finally:
            os.close(ready_w)
        self._ready_r = ready_r
        self._ready = False
        self.out = _Tail(os.dup(self.proc.stdout.fileno()), DEFAULT_MAX_OUTPUT_BYTES)
        self.err = _Tail(os.dup(self.proc.stderr.fileno()), DEFAULT_MAX_OUTPUT_BYTES)
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.started = time.monotonic()

    def _can_drop(self) -> bool:
        if self.bwrap:
            return True
        # Without bwrap the dropped uid must still reach Python through the real paths.
        return all(sandbox_fs.world_reachable(pathlib.Path(r)) for r in sandbox_fs.python_roots())

    def _nproc_offset(self) -> int:
        """RLIMIT_NPROC counts every process of the uid: without our own uid, allow for
        the ones the user already runs."""
        if self.drops_uid:
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

    def kill(self) -> None:
        """SIGKILLs bwrap's process group; the PID namespace takes everything inside.

        Once bwrap has exited (and been reaped) its namespace is already gone, and its
        pid may belong to someone else: then there is nothing to signal.
        """
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.error("sandbox process %d did not die after SIGKILL", self.proc.pid)
        if not self.bwrap and self.uid is not None:  # no PID namespace: sweep the uid
            _kill_uid(self.uid)

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
        sandbox_fs.remove_workdir(self.workdir)

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
        header = json.dumps({"memory_mb": limits.memory_mb, "cpu_s": limits.cpu_s,
                             "max_file_mb": limits.max_file_mb,
                             "max_procs": limits.max_procs + self._nproc_offset()})
        t0 = time.monotonic()
        try:
            self.proc.stdin.write(header.encode() + b"\n" + code.encode("utf-8", "surrogatepass"))
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        timed_out = False
        try:
            rc = self.proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill()
            rc = self.proc.returncode
        duration = time.monotonic() - t0
        self.kill()  # anything the program left behind in its namespace
        for t in (self.out, self.err):
            t.thread.join(timeout=5)
        res = _classify(rc, timed_out, duration, self.out.text(), self.err.text(),
                        self.workdir, limits)
        res.watched = tuple(self.out.watched)
        return res


def _kill_uid(uid: int) -> None:
    """SIGKILLs every process of `uid` (fallback mode sweep; a no-op under bwrap)."""
    for _ in range(3):
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    found = True
                    os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
        if not found:
            return
        time.sleep(0.05)


def _classify(rc, timed_out, duration, out, err, workdir, limits: Limits) -> SandboxResult:
    last = [ln for ln in err[-4000:].strip().splitlines() if ln.strip()]
    killed = rc in (-signal.SIGKILL, 128 + signal.SIGKILL)
    if timed_out:
        status, msg = "timeout", f"The program ran past the {limits.timeout_s:g} s time limit."
    elif rc == 0:
        status, msg = "ok", ""
    elif rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU) or (
            killed and limits.cpu_s is not None and duration >= limits.cpu_s):
        status, msg = "timeout", f"The program used more than {limits.cpu_s:g} s of CPU time."
    elif any(p in ln for ln in last[-3:] for p in _OOM_PATTERNS):  # the error, not a log
        status, msg = "oom", f"The program ran out of memory (limit {limits.memory_mb} MB)."
    elif killed:
        status, msg = "oom", ("The program was killed by SIGKILL, most likely by the system's "
                              "out-of-memory killer.")
    else:
        status = "error"
        msg = (f"The program failed with exit code {rc}"
               + (f": {last[-1][:300]}" if last else "."))
    return SandboxResult(rc, status, duration, out, err, workdir, msg)


# ----------------------------------------------------------------------------- entry


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


def __getattr__(name):  # `sandbox.WarmPool` without a circular import at load time
    if name == "WarmPool":
        from mle_rl.env.warm_pool import WarmPool
        return WarmPool
    raise AttributeError(name)
