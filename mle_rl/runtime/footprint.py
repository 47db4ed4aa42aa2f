"""What this process holds in memory, split so that a growing RSS can be told apart from a leak.

`footprint()` is logged with every update (metrics.jsonl: `mem/*`):

* `mem/rss_mb`, `mem/peak_rss_mb`: resident and peak resident memory (/proc/self/status).
* `mem/heap_in_use_mb`, `mem/heap_cached_mb`: under tcmalloc (`runtime/allocator.py`), the
  bytes the program has allocated and not freed, and the freed bytes tcmalloc keeps for
  reuse instead of returning them to the kernel. RSS ~ in use + cached + code. A leak grows
  *in use*; a one-off peak (a checkpoint's host copies, a new compiled shape) grows only
  *cached*, which tcmalloc hands out again and which does not climb run after run.
* `mem/jax_live_mb`, `mem/jax_live_arrays`: the JAX arrays still referenced (parameters,
  optimiser state, the sampler's copy): these must stay constant from update to update.
* `mem/device_in_use_mb`, `mem/device_peak_mb`, `mem/device_limit_mb`: on a GPU or TPU, the
  first local device's allocator (bytes in use now, the high-water mark since the process
  started, and what it may take): the measured side of `experiments/plan.py`'s prediction.
  Absent on the CPU, whose backend reports no allocator statistics.
"""

from __future__ import annotations

import ctypes
from typing import Optional

_MB = float(1 << 20)
_tc = None          # tcmalloc's MallocExtension_GetNumericProperty, once looked up


def _status_kb(*keys: str) -> dict:
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    out[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def tcmalloc_property(name: str) -> Optional[int]:
    """A numeric property of tcmalloc (e.g. "generic.current_allocated_bytes"), or None when
    this process does not run under tcmalloc."""
    global _tc
    if _tc is None:
        try:
            fn = ctypes.CDLL(None).MallocExtension_GetNumericProperty
        except (OSError, AttributeError):
            fn = False
        else:
            fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
            fn.restype = ctypes.c_int
        _tc = fn
    if not _tc:
        return None
    value = ctypes.c_size_t(0)
    return int(value.value) if _tc(name.encode(), ctypes.byref(value)) else None


def rss_now() -> dict:
    """{"rss_mb", "peak_rss_mb"} of this process now (empty where /proc is not readable): the
    trainer records it at each stage of its start (`memory_stages_mb` in summary.json), so
    that a run's peak can be read against the process's baseline before the first compile."""
    st = _status_kb("VmRSS", "VmHWM")
    return {k: round(st[s] / 1024, 1) for k, s in (("rss_mb", "VmRSS"), ("peak_rss_mb", "VmHWM"))
            if s in st}


def footprint() -> dict:
    """This process's memory now, in MiB (see the module doc); keys absent where unknown."""
    out = {f"mem/{k}": v for k, v in rss_now().items()}
    in_use = tcmalloc_property("generic.current_allocated_bytes")
    if in_use is not None:
        out["mem/heap_in_use_mb"] = in_use / _MB
        cached = [tcmalloc_property(p) for p in (
            "tcmalloc.pageheap_free_bytes", "tcmalloc.central_cache_free_bytes",
            "tcmalloc.transfer_cache_free_bytes", "tcmalloc.thread_cache_free_bytes")]
        out["mem/heap_cached_mb"] = sum(c or 0 for c in cached) / _MB
    try:
        import jax
        live = jax.live_arrays()
        out["mem/jax_live_mb"] = sum(a.nbytes for a in live) / _MB
        out["mem/jax_live_arrays"] = len(live)
    except Exception:        # a backend that cannot list its arrays: leave them out
        pass
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:        # no backend, or one without allocator statistics
        stats = {}
    for key, name in (("bytes_in_use", "device_in_use_mb"),
                      ("peak_bytes_in_use", "device_peak_mb"), ("bytes_limit", "device_limit_mb")):
        if key in stats:
            out[f"mem/{name}"] = stats[key] / _MB
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}
