"""Per-action overhead of the sandbox: warm pool vs a cold `python` start.

Every action runs the same program, which only imports numpy, pandas and scikit-learn,
so its wall time is all overhead (sandbox + interpreter start-up + imports). Three ways,
each timed end to end on the caller's side, median over N actions:

  cold python   `python -c PROGRAM` as a plain subprocess (no sandbox, same thread pins):
                the reference
  cold sandbox  `run_program(PROGRAM, ...)`: a fresh bubblewrap sandbox per action
  warm pool     `run_program(PROGRAM, ..., pool=WarmPool(...))`, steady state: the pool's
                next sandbox has finished importing before the action starts (its
                imports are paid in the background, ~1-2 CPU-seconds per action)

    python benchmarks/bench_sandbox.py [--n 20]
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from mle_rl.env import sandbox, sandbox_fs, warm_pool

PROGRAM = ("import numpy, pandas, sklearn, sklearn.linear_model, sklearn.ensemble, "
           "sklearn.model_selection, sklearn.metrics\nprint('ok')\n")


def _median_ms(times):
    return 1000 * statistics.median(times)


def bench(n: int) -> dict:
    public = pathlib.Path(tempfile.mkdtemp(prefix="bench_public_"))
    (public / "train.csv").write_text("id,x\n0,1\n")
    cold_python, cold_box, warm = [], [], []
    env = {**os.environ, **{k: "1" for k in sandbox_fs.THREAD_VARS}}
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", PROGRAM], check=True, capture_output=True,
                       env=env)
        cold_python.append(time.perf_counter() - t)
    for _ in range(n):
        t = time.perf_counter()
        r = sandbox.run_program(PROGRAM, public, timeout_s=60, memory_mb=4096)
        cold_box.append(time.perf_counter() - t)
        assert r.status == "ok", r.stderr_tail
        sandbox.remove_workdir(r.workdir)
    with warm_pool.WarmPool(size=1, public_dir=public) as pool:
        for _ in range(n):
            pool.wait_ready(public)
            t = time.perf_counter()
            r = sandbox.run_program(PROGRAM, public, timeout_s=60, memory_mb=4096, pool=pool)
            warm.append(time.perf_counter() - t)
            assert r.status == "ok", r.stderr_tail
            sandbox.remove_workdir(r.workdir)
        served = pool.stats["served_warm"]
    return {"n": n, "cold_python_ms": _median_ms(cold_python),
            "cold_sandbox_ms": _median_ms(cold_box), "warm_pool_ms": _median_ms(warm),
            "served_warm": served, "bwrap": sandbox.use_bwrap()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="actions per way (median over them)")
    n = ap.parse_args().n
    print(f"timing {n} actions each way (sandbox: {'bwrap' if sandbox.use_bwrap() else 'fallback'})"
          " ...", flush=True)
    r = bench(n)
    print(f"cold python  (reference)  median {r['cold_python_ms']:8.1f} ms")
    print(f"cold sandbox              median {r['cold_sandbox_ms']:8.1f} ms  "
          f"ratio to cold python {r['cold_sandbox_ms'] / r['cold_python_ms']:.2f}")
    print(f"warm pool                 median {r['warm_pool_ms']:8.1f} ms  "
          f"ratio to cold python {r['warm_pool_ms'] / r['cold_python_ms']:.3f}  "
          f"({r['served_warm']}/{n} served warm; target <= 100 ms)")


if __name__ == "__main__":
    main()
