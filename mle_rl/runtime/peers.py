"""A lost process in a multi-process run: every other process stops within a bounded time,
with one line naming the lost one.

When one process of a `--num_processes` run dies (kill -9, OOM, a lost host), the others
must not wait for it: a collective with a dead peer fails at once on a closed connection,
or blocks until the coordination service's own heartbeat timeout aborts the process with a
stack dump (and `jax.distributed.shutdown` at exit waits for the dead peer again).

`PeerWatch` (one daemon thread, started after `jax.distributed.initialize`) bumps this
process's counter in the coordination service's key-value store every `interval` seconds
and reads everyone's. A peer whose counter has not moved for `timeout` seconds is lost; if
the store itself cannot be reached for that long, process 0 (which hosts it) is lost. Then
the watch prints one line (the lost process, and the checkpoint every process finished,
from which `--resume` of all processes continues) and ends this process with status 5,
without the shutdown barrier. Actors die with their parent and the janitor removes their
sandboxes, so nothing is left behind. The main thread, when a collective fails on a dead
peer first, hands its error to `exit_lost`, which does the same.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

EXIT_LOST = 5
_PEER_FAILURE = ("Gloo", "Connection closed by peer", "Connection reset by peer",
                 "heartbeat", "coordination service", "UNAVAILABLE", "Broken pipe",
                 "Socket closed")
_KEY = "mle_rl/peer_beat/"

_WATCH: Optional["PeerWatch"] = None


def is_peer_failure(e: BaseException) -> bool:
    """Whether `e` is how a collective or the coordination service fails on a dead peer."""
    while e is not None:
        if any(s in str(e) for s in _PEER_FAILURE):
            return True
        e = e.__cause__ or e.__context__
    return False


def committed_steps(checkpoint_dir) -> list[int]:
    """The checkpoint steps in `checkpoint_dir` that were committed (whole on every process:
    orbax renames a step's directory into place only then)."""
    try:
        return sorted(int(n) for n in os.listdir(checkpoint_dir) if n.isdigit())
    except OSError:
        return []


class PeerWatch:
    """See the module docstring. `client`: the jax.distributed client (key-value store);
    `exit_fn` (tests: a recorder instead of os._exit)."""

    def __init__(self, client, process_id: int, num_processes: int, checkpoint_dir, *,
                 interval: float = 2.0, timeout: float = 30.0,
                 exit_fn: Callable[[int], None] = os._exit, log=None):
        self.client, self.me, self.n = client, int(process_id), int(num_processes)
        self.checkpoint_dir = checkpoint_dir
        self.interval, self.timeout = float(interval), float(timeout)
        self.exit_fn = exit_fn
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.lost: Optional[str] = None          # why, once decided
        self._seen: dict = {}                    # process id -> (counter, when it last moved)
        self._store_ok = time.monotonic()
        self._done = threading.Event()
        self._judging = True
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._beat, name="peer-beat", daemon=True),
                         threading.Thread(target=self._judge, name="peer-judge", daemon=True)]

    def start(self) -> "PeerWatch":
        now = time.monotonic()
        self._seen = {p: (None, now) for p in range(self.n) if p != self.me}
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def finished(self) -> None:
        """This process is past its last collective: stop judging peers (a peer that ends
        first is not lost), but keep beating until exit (a peer still finishing must not
        count this one as lost)."""
        self._judging = False

    # ------------------------------------------------------------------ threads
    def _beat(self) -> None:
        """Bump our counter, read everyone's; record when each peer's last moved."""
        while not self._done.is_set():
            try:
                self.client.key_value_increment(f"{_KEY}{self.me}", 1)
                counters = dict(self.client.key_value_dir_get(_KEY))
            except Exception:  # noqa: BLE001 - the store is unreachable; _judge times it
                self._done.wait(self.interval)
                continue
            now = time.monotonic()
            with self._lock:
                self._store_ok = now
                for p, (old, when) in list(self._seen.items()):
                    value = counters.get(f"{_KEY}{p}")
                    if value is not None and value != old:
                        self._seen[p] = (value, now)
            self._done.wait(self.interval)

    def _judge(self) -> None:
        while not self._done.wait(min(1.0, self.interval)):
            if not self._judging:
                return
            why = self.check(time.monotonic())
            if why:
                self._exit(why)
                return

    def check(self, now: float) -> Optional[str]:
        """Why a peer counts as lost at time `now`, or None."""
        with self._lock:
            if self.me != 0 and now - self._store_ok > self.timeout:
                return (f"process 0 of {self.n} (the coordinator) was lost: its key-value "
                        f"store has not answered for {now - self._store_ok:.0f} s")
            stale = sorted(p for p, (_, when) in self._seen.items() if now - when > self.timeout)
        if stale:
            names = ", ".join(str(p) for p in stale)
            return (f"process {names} of {self.n} was lost: no heartbeat for more than "
                    f"{self.timeout:.0f} s")
        return None

    # ------------------------------------------------------------------ exit
    def _exit(self, why: str, cause: Optional[BaseException] = None) -> None:
        if self.lost is not None:
            return
        self.lost = why
        steps = committed_steps(self.checkpoint_dir)
        resume = (f"run every process again with --resume: they continue from checkpoint "
                  f"{steps[-1]}, the last one all of them finished" if steps else
                  "no checkpoint was finished by all processes: start the run again")
        detail = f" (here: {_first_line(cause)})" if cause is not None else ""
        self.log(f"error: {why}{detail}; process {self.me} stops too; {resume}.")
        self.stop()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            self.exit_fn(EXIT_LOST)

    def exit_lost(self, cause: BaseException, wait: Optional[float] = None) -> None:
        """The main thread's collective failed on a dead peer: wait (up to the timeout and
        a beat) for the watch to name it, then stop as the watch would."""
        deadline = time.monotonic() + (self.timeout + 2 * self.interval if wait is None
                                       else wait)
        while self.lost is None and time.monotonic() < deadline:
            why = self.check(time.monotonic())
            if why:
                self._exit(why, cause)
                return
            time.sleep(0.2)
        self._exit(self.lost or f"a peer of process {self.me} of {self.n} was lost", cause)


def _first_line(e: BaseException, limit: int = 160) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if len(text) <= limit else text[:limit] + "..."


def start(process_id: int, num_processes: int, checkpoint_dir, *, timeout: float = 30.0,
          interval: float = 2.0) -> Optional[PeerWatch]:
    """Starts the process-wide watch of a multi-process run (None when single-process, or
    when this JAX has no coordination client)."""
    global _WATCH
    if num_processes <= 1:
        return None
    try:
        from jax._src import distributed as jax_distributed
        client = jax_distributed.global_state.client
    except (ImportError, AttributeError):
        client = None
    if client is None:
        print("warning: no jax.distributed client: a lost process is not watched for",
              file=sys.stderr)
        return None
    _WATCH = PeerWatch(client, process_id, num_processes, checkpoint_dir, timeout=timeout,
                       interval=interval).start()
    return _WATCH


def current() -> Optional[PeerWatch]:
    return _WATCH


def fault_point(phase: str, step: int) -> None:
    """Fault injection for the multi-process tests: `MLE_RL_KILL_AT=P:PHASE:STEP` makes
    process P kill itself (SIGKILL) on reaching PHASE (sample, update, checkpoint) of update
    STEP. Unset (always, outside the tests), this does nothing."""
    spec = os.environ.get("MLE_RL_KILL_AT")
    if not spec:
        return
    import jax
    p, ph, st = spec.split(":")
    if int(p) == jax.process_index() and ph == phase and int(st) == int(step):
        os.kill(os.getpid(), signal.SIGKILL)
