"""The persistent compilation cache: a second process loads what the first compiled, and
the compile log counts real compilations only."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys
from mle_rl.runtime import compile_cache
where = compile_cache.enable()
import jax, jax.numpy as jnp
log = compile_cache.CompileLog.get()
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
f(jnp.ones((64, 64))).block_until_ready()
g = jax.jit(lambda x: jnp.cos(x) * 2 - x)
g(jnp.ones((32,))).block_until_ready()
import os
print(json.dumps({"dir": where, "compiles": log.take()[0],
                  "cap": os.environ.get("JAX_COMPILATION_CACHE_MAX_SIZE")}))
"""
PLAIN = """
import jax, jax.numpy as jnp
jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((64, 64))).block_until_ready()
"""


def _run(env, script=SCRIPT):
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "persistent compilation cache" not in p.stderr, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1]) if script is SCRIPT else None


@pytest.fixture
def clean_env(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "MLE_RL_JAX"))}
    env["MLE_RL_CACHE"] = str(tmp_path / "cache")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"   # cache even this tiny program
    env["JAX_PLATFORMS"] = "cpu"
    return env


def test_second_process_reuses_the_first_ones_compilation(clean_env, tmp_path):
    first = _run(clean_env)
    assert first["dir"] == str(tmp_path / "cache" / "jax_cache")
    assert first["compiles"] >= 1 and first["cap"] == str(2 << 30)   # ours: capped
    assert any((tmp_path / "cache" / "jax_cache").iterdir())
    second = _run(clean_env)
    assert second["compiles"] == 0                 # loaded from disk, not compiled


def test_off_and_an_explicit_directory(clean_env, tmp_path):
    off = _run({**clean_env, "MLE_RL_JAX_CACHE": "off"})
    assert off["dir"] is None and not (tmp_path / "cache" / "jax_cache").exists()
    mine = tmp_path / "mine"
    got = _run({**clean_env, "MLE_RL_JAX_CACHE": str(mine)})
    assert got["dir"] == str(mine) and any(mine.iterdir())
    kept = _run({**clean_env, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "theirs")})
    assert kept["dir"] == str(tmp_path / "theirs")   # a cache already chosen is kept


def test_compile_log_counts_compilations_in_this_process():
    import jax
    import jax.numpy as jnp

    from mle_rl.runtime.compile_cache import CompileLog

    log = CompileLog.get()
    log.take()
    f = jax.jit(lambda x: x * 3 + 1)
    f(jnp.arange(7.0)).block_until_ready()
    f(jnp.arange(7.0)).block_until_ready()      # same shape: no new compilation
    n, seconds = log.take()
    assert n >= 1 and seconds >= 0
    assert log.take() == (0, 0.0)
    assert CompileLog.get() is log


def test_a_directory_shared_with_uncapped_processes_stays_uncapped(clean_env, tmp_path):
    # JAX caps a cache by keeping an access-time file per entry; a capped process reading a
    # directory that uncapped ones wrote (the test session's) failed every write.
    env = {**clean_env, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "shared")}
    _run(env, PLAIN)                                   # a plain JAX process writes first
    got = _run(env)
    assert got["cap"] is None and got["dir"] == str(tmp_path / "shared")
    _run(env, PLAIN)                                   # and after
