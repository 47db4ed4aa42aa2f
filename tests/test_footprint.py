"""runtime/footprint.py: memory in use told apart from memory the allocator keeps."""

import json
import os
import subprocess
import sys

import pytest

from mle_rl.runtime import allocator, footprint

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from mle_rl.runtime import allocator
allocator.reexec_with_tcmalloc()
import numpy as np
from mle_rl.runtime.footprint import footprint
footprint()                               # imports jax once
before = footprint()
x = np.ones((64, (1 << 20) // 8))        # 64 MiB
x[:] = 2.0
held = footprint()
del x
freed = footprint()
kept = allocator.trim_cache(share=1.0)     # under the share: tcmalloc keeps its pages
returned = allocator.trim_cache(share=0.0)
trimmed = footprint()
print(json.dumps([before, held, freed, kept, returned, trimmed]))
"""


def test_footprint_reports_this_process_and_its_jax_arrays():
    import jax.numpy as jnp
    before = footprint.footprint()
    a = jnp.ones((256, 1024), jnp.float32)            # 1 MiB, referenced
    now = footprint.footprint()
    assert now["mem/rss_mb"] > 0 and now["mem/peak_rss_mb"] >= now["mem/rss_mb"]
    assert now["mem/jax_live_arrays"] == before["mem/jax_live_arrays"] + 1
    assert now["mem/jax_live_mb"] == pytest.approx(before["mem/jax_live_mb"] + 1.0, abs=0.1)
    del a


@pytest.mark.skipif(allocator.find_tcmalloc() is None, reason="tcmalloc is not installed")
def test_under_tcmalloc_a_freed_block_moves_from_in_use_to_cached():
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", allocator.ENV_CHOICE, "MLE_RL_MALLOC_REEXEC")}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(root=_ROOT)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    before, held, freed, kept, returned, trimmed = json.loads(out.stdout.strip().splitlines()[-1])
    assert held["mem/heap_in_use_mb"] - before["mem/heap_in_use_mb"] == pytest.approx(64, abs=4)
    assert freed["mem/heap_in_use_mb"] == pytest.approx(before["mem/heap_in_use_mb"], abs=4)
    # tcmalloc keeps the freed block for reuse: it moves to cached, RSS need not drop
    assert freed["mem/heap_cached_mb"] - held["mem/heap_cached_mb"] > 56
    # trim_cache hands the cached pages back to the kernel only past its share of the memory
    assert kept == 0 and returned / (1 << 20) > 56
    assert trimmed["mem/rss_mb"] < freed["mem/rss_mb"] - 56
    assert trimmed["mem/heap_in_use_mb"] == pytest.approx(freed["mem/heap_in_use_mb"], abs=4)


def test_without_tcmalloc_the_heap_split_is_left_out():
    env = {**os.environ, allocator.ENV_CHOICE: "system"}
    env.pop("LD_PRELOAD", None)
    code = (f"import sys, json; sys.path.insert(0, {_ROOT!r}); "
            "from mle_rl.runtime.footprint import footprint; print(json.dumps(footprint()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    got = json.loads(out.stdout)
    assert "mem/rss_mb" in got and "mem/heap_in_use_mb" not in got
    code = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
            "from mle_rl.runtime import allocator; print(allocator.trim_cache(share=0.0))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "0"        # nothing to trim without tcmalloc


def test_the_trainer_trims_at_each_change_of_phase_only(monkeypatch):
    """Trainer._enter_phase: a trim when sampling follows an update or an update follows
    sampling, none within a phase; what was returned is summed for mem/released_mb."""
    from types import SimpleNamespace

    from mle_rl.agent.trainer import Trainer

    calls = []
    monkeypatch.setattr(allocator, "trim_cache", lambda: calls.append(1) or 3 * 2**20)
    fake = SimpleNamespace(_phase=None, _released_mb=0.0)
    phases = ["sample", "sample", "update", "sample", "sample", "sample", "update", "update"]
    returned = [Trainer._enter_phase(fake, p) for p in phases]
    assert returned == [3 * 2**20, 0, 3 * 2**20, 3 * 2**20, 0, 0, 3 * 2**20, 0]
    assert len(calls) == 4 and fake._released_mb == pytest.approx(12.0)


def test_device_allocator_statistics_where_the_backend_reports_them(monkeypatch):
    """GPU/TPU: the allocator's bytes in use, high-water mark and limit (the measured side
    of plan.py's prediction); the CPU backend reports none and the keys are left out."""
    import jax

    class Dev:
        def memory_stats(self):
            return {"bytes_in_use": 3 << 20, "peak_bytes_in_use": 5 << 20, "bytes_limit": 8 << 30}

    cpu = footprint.footprint()
    assert not any(k.startswith("mem/device_") for k in cpu)
    monkeypatch.setattr(jax, "local_devices", lambda: [Dev()])
    got = footprint.footprint()
    assert (got["mem/device_in_use_mb"], got["mem/device_peak_mb"],
            got["mem/device_limit_mb"]) == (3.0, 5.0, 8192.0)
