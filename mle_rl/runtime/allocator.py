"""Run the process with tcmalloc, a caching allocator, when the machine has it.

XLA:CPU allocates every large temporary of a jitted step (logits, attention scores, MLP
activations) with `malloc` and frees it at the end of the step. glibc serves blocks above
its mmap threshold (at most 32 MiB) with fresh `mmap`s and returns them to the kernel on
`free`, so every step touches those pages again: a [4096, 8192] float32 `x + 1` took 104 ms
of CPU here, 85 ms of it in the kernel (32769 page faults per call), and 12 ms under
tcmalloc, which keeps freed memory for the next step (0 faults). On the tiny model's
training step (8 x 512 tokens, forward + backward, one core) that is 7.2 s -> 5.9 s.

An allocator must be loaded before the process starts, so `reexec_with_tcmalloc()`
re-executes the interpreter with the same arguments and `LD_PRELOAD` set. It does nothing
when tcmalloc is already loaded, when it is not installed (`launch/setup.sh` installs
Debian's `libtcmalloc-minimal4`), or when `MLE_RL_MALLOC=system`. Children (actors)
inherit it through the environment; sandboxed generated code does not, its environment is
built from scratch (`env/sandbox_fs.sandbox_env`).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

ENV_CHOICE = "MLE_RL_MALLOC"          # "system" turns the re-exec off
_ENV_GUARD = "MLE_RL_MALLOC_REEXEC"   # set in the re-executed process: never loop
_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
         "/usr/local/lib")


def find_tcmalloc() -> Optional[str]:
    """Path of an installed tcmalloc shared library, or None."""
    for d in _DIRS:
        for name in _NAMES:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
    return None


def loaded() -> Optional[str]:
    """Which caching allocator this process runs with ('tcmalloc', 'jemalloc'), or None."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return None
    for name in ("tcmalloc", "jemalloc"):
        if name in maps:
            return name
    return None


def reexec_with_tcmalloc() -> None:
    """Replace this process by the same command with tcmalloc preloaded (see module doc).

    Call it first thing in a program's entry point, before threads or heavy imports."""
    if os.environ.get(ENV_CHOICE, "").lower() == "system" or os.environ.get(_ENV_GUARD):
        return
    if loaded() is not None:
        return
    path = find_tcmalloc()
    argv = getattr(sys, "orig_argv", None)
    if path is None or not argv:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = path + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env[_ENV_GUARD] = "1"
    # tcmalloc reports every allocation above 1 GiB on stderr by default (model weights).
    env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", str(1 << 40))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(argv), env)


# tcmalloc's free pages are handed back to the kernel once they pass this share of the
# machine's memory (trim_cache; 2.4 GiB on a 24 GiB machine, which the tiny default's
# phases never leave behind). Below it, keeping them is what makes tcmalloc fast (the
# next step reuses them without page faults); above it, they starve the rest of the machine:
# at the 0.5B shape an update's 8-13 GiB of freed temporaries stayed resident in the
# trainer while the actors and the sandboxed programs ran (18.4 GiB resident between
# updates; 5.7 GiB with the trim). The price: the next update faults those pages in again,
# 56 -> 70 s per update there (2 cores). benchmarks/results/real_shapes.md.
#
# The trainer trims at each change of phase (before an update, before the first sampling
# call after it, before a checkpoint), not only after updates. tcmalloc's page heap picks
# the best-fitting free span whether its pages are resident or already handed back, so each
# phase faults in fresh pages while the other phase's freed pages stay resident: with the
# trim after updates only, the second update of the 0.5B run peaked at 17.6-18.4 GiB
# resident while tcmalloc had at most 12.5 GiB allocated (the sampler's 4.5 GiB of freed
# pages on top). Trimmed at both changes, each phase peaks at its own allocation (13.7 GiB)
# every time.
TRIM_SHARE = 0.10


def trim_cache(share: float = TRIM_SHARE) -> int:
    """Under tcmalloc, when its free (cached) pages exceed `share` of the machine's memory,
    return them to the kernel. -> the bytes returned (0: under the share, or no tcmalloc)."""
    import ctypes

    from mle_rl.runtime.footprint import tcmalloc_property
    free = tcmalloc_property("tcmalloc.pageheap_free_bytes")
    if not free:
        return 0
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0
    if free <= share * total:
        return 0
    try:
        ctypes.CDLL(None).MallocExtension_ReleaseFreeMemory()
    except (OSError, AttributeError):
        return 0
    return free
