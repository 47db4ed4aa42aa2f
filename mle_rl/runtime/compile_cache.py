"""Compile once, reuse always: a persistent XLA compilation cache, and a compile log.

Every `run.py`, `evaluate.py` and `warm_start.py` process compiles the same sampler phases
and learner steps for the same model and shapes (a 20-update run spends most of its first
minute compiling). JAX can keep compiled executables on disk and load them in the next
process: `enable()` points it at `~/.cache/mle_rl/jax_cache` (under $MLE_RL_CACHE when
set), for every compilation of at least MIN_COMPILE_S, capped at MAX_BYTES (least recently
used entries go first). `MLE_RL_JAX_CACHE=DIR` moves it, `=off` turns it off; a
`JAX_COMPILATION_CACHE_DIR` already set (the test session's) is kept as its owner set it,
uncapped unless they capped it: with a cap, JAX keeps an access-time file beside every
entry and reads them all when it evicts, so a capped process sharing a directory with
uncapped ones (which write no such files) fails its writes. The cache key holds
the program, the compile options, the backend, jax/jaxlib versions and the devices, so an
entry is only reused where it was compiled for; an unreadable entry is compiled again.

`CompileLog` counts the XLA compilations of this process and their seconds (JAX's
`backend_compile_duration` event, which a load from the cache also sends: cache hits are
counted apart and not as compilations): the trainer logs them per update (`compiles`,
`compile_s`), so a run shows how many distinct shapes it compiled and what that cost.
"""

from __future__ import annotations

import os
import pathlib
import threading
from typing import Optional

ENV = "MLE_RL_JAX_CACHE"
MIN_COMPILE_S = 0.5                 # cheaper compilations are not worth a file
MAX_BYTES = 2 << 30                 # least recently used entries are evicted beyond this
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def default_dir() -> pathlib.Path:
    root = os.environ.get("MLE_RL_CACHE")
    base = pathlib.Path(root).expanduser() if root else pathlib.Path.home() / ".cache" / "mle_rl"
    return base / "jax_cache"


def enable(path: Optional[str] = None) -> Optional[str]:
    """Turns the persistent cache on for this process (and, through the environment, its
    children); returns its directory, or None when it is off. Safe before or after jax is
    imported; call it early (before the first compilation) for the most hits."""
    choice = os.environ.get(ENV, "")
    if choice.lower() in ("off", "0", "false", "none"):
        return None
    theirs = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    where = theirs or path or choice or str(default_dir())
    try:
        pathlib.Path(where).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None                   # an unwritable cache only costs compilations
    os.environ["JAX_COMPILATION_CACHE_DIR"] = where
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(MIN_COMPILE_S))
    if not theirs:                    # our directory: capped, and so are our children
        os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(MAX_BYTES))
    import sys
    if "jax" in sys.modules:          # already imported: its config read the old environment
        import jax
        jax.config.update("jax_compilation_cache_dir", where)
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
        cap = os.environ.get("JAX_COMPILATION_CACHE_MAX_SIZE")
        if cap:
            try:
                jax.config.update("jax_compilation_cache_max_size", int(cap))
            except Exception:  # noqa: BLE001 - an older jax without the option: no cap
                pass
    return where


class CompileLog:
    """Counts this process's XLA compilations and their backend seconds (loads from the
    persistent cache included in the seconds, not in the count). `take()` returns
    (compilations, seconds) since the last `take()`; `total` both since the log was made;
    `hits` the loads from the cache."""

    _instance: Optional["CompileLog"] = None
    _guard = threading.Lock()

    def __init__(self):
        self._lock = threading.Lock()
        self._n, self._s, self._hits = 0, 0.0, 0
        self.total = [0, 0.0]
        self.hits = 0

    @classmethod
    def get(cls) -> "CompileLog":
        """The process's log (registered with jax.monitoring once)."""
        with cls._guard:
            if cls._instance is None:
                import jax.monitoring

                cls._instance = cls()
                jax.monitoring.register_event_duration_secs_listener(cls._instance._on_duration)
                jax.monitoring.register_event_listener(cls._instance._on_event)
            return cls._instance

    def _on_duration(self, event: str, seconds: float, **_) -> None:
        if event == BACKEND_COMPILE_EVENT:
            with self._lock:
                self._n += 1
                self._s += seconds
                self.total[0] += 1
                self.total[1] += seconds

    def _on_event(self, event: str, **_) -> None:
        if event == CACHE_HIT_EVENT:
            with self._lock:        # its backend event follows: not a compilation
                self._hits += 1
                self.hits += 1
                self.total[0] -= 1

    def take(self) -> tuple[int, float]:
        with self._lock:
            out = (max(0, self._n - self._hits), float(self._s))
            self._n, self._s, self._hits = 0, 0.0, 0
        return out
