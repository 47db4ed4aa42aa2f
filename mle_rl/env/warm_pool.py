"""A pool of pre-started, single-use sandboxes whose Python has already imported the
usual libraries, so an action does not pay ~1-2 s of imports.

Isolation is the same as a cold start: each pooled sandbox is its own bubblewrap with its
own fresh working directory, uid and PID namespace, the task's `public/` bound read-only;
it blocks reading its program from stdin, serves exactly one program and is discarded.
Refilling costs nothing on the caller's thread: a replacement is spawned (`Popen` returns
at once) whenever one is taken, and it imports in the background.

    with WarmPool(size=2) as pool:
        result = run_program(code, task.public_dir, timeout_s=60, memory_mb=4096, pool=pool)
"""

from __future__ import annotations

import atexit
import collections
import logging
import pathlib
import threading
import weakref
from typing import Optional, Sequence

from mle_rl.env import sandbox

log = logging.getLogger(__name__)

DEFAULT_PRELOAD = ("numpy", "pandas", "sklearn", "sklearn.linear_model", "sklearn.ensemble",
                   "sklearn.model_selection", "sklearn.metrics", "sklearn.preprocessing")


class WarmPool:
    """Keeps `size` warm sandboxes ready for each of the `max_dirs` most recent public dirs.

    Args:
      size: warm sandboxes kept per public dir (each holds ~150 MB while it waits).
      preload: modules imported ahead of time.
      env_threads: thread count pinned in each sandbox's environment.
      max_procs: RLIMIT_NPROC of each sandbox (the per-run value may only lower it).
      public_dir: optional dir to start warming for right away.
      max_dirs: how many public dirs (tasks) to keep warm sandboxes for.
    """

    def __init__(self, size: int = 2, preload: Sequence[str] = DEFAULT_PRELOAD, *,
                 env_threads: int = 1, max_procs: int = sandbox.DEFAULT_MAX_PROCS,
                 public_dir: Optional[pathlib.Path] = None, max_dirs: int = 4):
        if size < 1:
            raise ValueError(f"WarmPool size must be at least 1, got {size}.")
        self.size, self.preload = int(size), tuple(preload)
        self.env_threads, self.max_procs, self.max_dirs = env_threads, max_procs, max_dirs
        self._ready: "collections.OrderedDict[pathlib.Path, collections.deque]" = (
            collections.OrderedDict())
        self._lock = threading.Lock()
        self._closed = False
        self.stats = {"served_warm": 0, "spawned": 0, "discarded": 0,
                      "stale_swept": sandbox.sweep_stale()}
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref().close())
        if public_dir is not None:
            with self._lock:
                self._fill(pathlib.Path(public_dir).resolve())

    def __enter__(self) -> "WarmPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _spawn(self, public_dir: pathlib.Path) -> sandbox.Sandbox:
        self.stats["spawned"] += 1
        return sandbox.Sandbox(public_dir, preload=self.preload, env_threads=self.env_threads,
                               max_procs=self.max_procs)

    def _fill(self, public_dir: pathlib.Path) -> collections.deque:
        queue = self._ready.setdefault(public_dir, collections.deque())
        self._ready.move_to_end(public_dir)
        while len(queue) < self.size:
            queue.append(self._spawn(public_dir))
        while len(self._ready) > self.max_dirs:  # forget the least recently used task
            _, old = self._ready.popitem(last=False)
            for box in old:
                box.close()
        return queue

    def acquire(self, public_dir: pathlib.Path) -> Optional[sandbox.Sandbox]:
        """Takes a sandbox for `public_dir` (the caller runs it once, then it is spent)
        and spawns its replacement. Returns None once the pool is closed."""
        public_dir = pathlib.Path(public_dir).resolve()
        with self._lock:
            if self._closed:
                return None
            queue = self._fill(public_dir)
            box = None
            while queue and box is None:
                box = queue.popleft()
                if not box.alive():  # died while waiting (e.g. killed from outside)
                    self.stats["discarded"] += 1
                    box.close()
                    box = None
            self._fill(public_dir)
            if box is not None:
                self.stats["served_warm"] += 1
            return box

    def wait_ready(self, public_dir: pathlib.Path, timeout_s: float = 120.0) -> bool:
        """Blocks until every waiting sandbox for `public_dir` has finished importing."""
        with self._lock:
            boxes = list(self._ready.get(pathlib.Path(public_dir).resolve(), ()))
        return all(box.wait_ready(timeout_s) for box in boxes)

    def close(self) -> None:
        """Kills every waiting sandbox and deletes their working directories."""
        with self._lock:
            self._closed = True
            boxes = [b for q in self._ready.values() for b in q]
            self._ready.clear()
        for box in boxes:
            box.close()
