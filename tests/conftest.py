"""Shared test set-up: 4 forced CPU devices (for the sharding tests) and small helpers."""

import atexit
import os
import shutil
import tempfile

# Must be set before JAX initialises its backends; harmless for tests that use 1 device.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The native CPU decode kernels whenever they build (as before the decode path was measured
# per machine, models/decode_path.py): the sampler's tests then exercise the same path on
# every machine, and no test process times the two paths (~15 s, under the other worker's
# load) or caches a decision for the machine. tests/test_decode_path.py tests the choice.
os.environ.setdefault("MLE_RL_CPU_KERNELS", "on")
# One persistent XLA compilation cache for this test session, fresh each session: the
# trainer tests start experiments/run.py ~15 times with the same model and shapes, and
# each start compiled the same sampler and learner step again (~16 s each). Subprocesses
# inherit it through the environment. Removed at exit.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = tempfile.mkdtemp(prefix="mle_rl_test_jax_cache_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)

import pytest  # noqa: E402


# Modules whose tests take longest (trainer runs in subprocesses, learner compilations).
# They are collected first, so that with `-n 2` (pytest-xdist, which hands out the first
# quarter of the tests round-robin) both workers start on them instead of one worker
# finishing them alone at the end.
HEAVY_FIRST = ("test_trainer.py", "test_learner.py", "test_warmstart_sft.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long test, run by benchmark/launch scripts, not CI")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.path.name
        return HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)
    items.sort(key=rank)   # stable: the order within a module is kept
