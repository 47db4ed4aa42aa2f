#!/usr/bin/env bash
# Set up a fresh machine for mle_rl: bubblewrap (the sandbox), a virtualenv, the package
# with its test extras. Idempotent: a second run only checks.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Debian packages: bubblewrap (the sandbox for generated code) and tcmalloc (a caching
# allocator: XLA:CPU's large temporaries then cost no page faults, see
# mle_rl/runtime/allocator.py).
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
# g++ builds the native CPU decode kernels on first use (mle_rl/models/cpu_kernels.py);
# without it sampling on CPU uses the XLA path (faster than the kernels on some CPUs: the
# end of this script says which one this machine uses).
command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || need+=(g++)
compgen -G "/usr/lib*/libtcmalloc_minimal.so.4" >/dev/null \
  || compgen -G "/usr/lib/*/libtcmalloc_minimal.so.4" >/dev/null || need+=(libtcmalloc-minimal4)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "[setup] WARNING: cannot install ${need[*]} here (no apt-get or not root). Without" \
         "bubblewrap generated code does not run at all (the sandbox fails closed); without" \
         "tcmalloc training and sampling on CPU are slower (glibc malloc); without g++" \
         "sampling on CPU always uses the XLA path (no native kernels)." >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
PY=.venv/bin/python
"$PY" -m pip install -q --upgrade pip
# torch==2.13.0 (CPU wheel) is only used by tests and benchmarks as a reference. The exact
# versions come from constraints.txt (what the project was last tested with).
"$PY" -m pip install -q -c constraints.txt -e '.[test]'
"$PY" - <<'PY'
import jax
print(f"[setup] ok: jax {jax.__version__} on {jax.devices()[0].platform}, {jax.device_count()} device(s)")
PY
check_bwrap || echo "[setup] the rest of the setup is done; fix bubblewrap before running jobs." >&2
# Which path decodes float32 sampling on CPU here: the native kernels or XLA, whichever is
# faster on this machine (mle_rl/models/decode_path.py: measured once, 15-45 s, and cached
# beside the kernels; a second run reads it). Without a compiler: XLA, and it says why.
JAX_PLATFORMS=cpu "$PY" -c 'from mle_rl import sampling
print("[setup] CPU decode path:", sampling.cpu_decode_path(announce=False).line)' \
  || echo "[setup] WARNING: the CPU decode path was not decided (see above); the first" \
          "process that samples on CPU decides it." >&2
