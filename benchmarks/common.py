"""Shared helpers of the model benchmarks: thread settings, timing, the machine's matmul peak.

Both sides of a comparison run in one process on the same cores: `setup_threads()` sets
torch's intra-op pool to the number of cores this process may use (XLA:CPU uses all of
them by default); with `cores=n` it first pins the whole process, every thread of both
libraries, to n cores.
"""

from __future__ import annotations

import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable

# Run from a fresh checkout (`python benchmarks/bench_x.py`) without installing the package.
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def setup_allocator(choice: str) -> None:
    """'tcmalloc': re-execute this benchmark with tcmalloc preloaded when the machine has it
    (what our entry points do, see `mle_rl/runtime/allocator.py`); 'system': keep glibc
    malloc. Both sides of a comparison run in this one process, so both get the same allocator.
    Call it first in main()."""
    from mle_rl.runtime import allocator
    if choice == "system":
        if allocator.loaded():
            raise SystemExit(f"--malloc=system, but {allocator.loaded()} is already loaded "
                             "(LD_PRELOAD?); unset it first.")
        os.environ[allocator.ENV_CHOICE] = "system"   # and for any child process
        return
    allocator.reexec_with_tcmalloc()


def setup_threads(cores: int | None = None) -> int:
    """Give torch as many intra-op threads as XLA:CPU uses. Returns that number.

    cores=None uses every core this process may run on; cores=n first pins the process to
    the first n of them (call it before jax or torch start their thread pools: threads
    inherit the affinity), so both sides run on the same n cores."""
    if cores is not None:
        allowed = sorted(os.sched_getaffinity(0))
        if not 1 <= cores <= len(allowed):
            raise SystemExit(f"--cores must be between 1 and {len(allowed)}, got {cores}.")
        os.sched_setaffinity(0, allowed[:cores])
    import torch
    n = available_cores()
    torch.set_num_threads(n)
    return n


def thread_report() -> str:
    import jax
    import torch
    return (f"cores={sorted(os.sched_getaffinity(0))}  torch.get_num_threads()={torch.get_num_threads()}"
            f"  torch.get_num_interop_threads()={torch.get_num_interop_threads()}\n"
            f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}  jax devices={jax.devices()}\n"
            f"allocator: {_allocator_name()}")


def _allocator_name() -> str:
    from mle_rl.runtime import allocator
    return allocator.loaded() or "glibc malloc (system)"


def load_average() -> str:
    """`uptime`'s three load averages, to quote beside a timing."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_report() -> str:
    import jax
    import torch
    try:
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        load = "uptime unavailable"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  cpu: {cpu}\n"
            f"load: {load}\njax {jax.__version__}  torch {torch.__version__}")


def torch_device(choice: str):
    """'cpu' -> ('cpu', None). 'accelerator' (the JAX side runs on the default backend, a
    GPU or TPU) -> ('cuda', None) when torch has CUDA, else (None, why): no torch
    reference on this device (TPUs; a CPU-only torch wheel). With an accelerator, JAX's
    float32 matmuls run at full precision (as torch's on CUDA), not TF32/bf16 passes."""
    if choice == "cpu":
        return "cpu", None
    import jax
    import torch
    jax.config.update("jax_default_matmul_precision", "highest")
    if torch.cuda.is_available():
        return "cuda", None
    return None, (f"torch {torch.__version__} has no CUDA device here (JAX backend: "
                  f"{jax.default_backend()}); the transformers reference is skipped")


def torch_sync(device) -> None:
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def time_runs(fn: Callable[[], object], repeats: int, warmup: int = 1,
              label: str | None = None, cpu: list | None = None) -> list[float]:
    """Wall-clock seconds of `repeats` calls of fn() after `warmup` untimed calls; with
    `label`, prints one progress line per call. With a list `cpu`, appends each timed
    call's CPU seconds of this whole process (all threads, user + system) to it.

    fn must block until its result is ready (call `jax.block_until_ready` inside)."""
    for i in range(warmup):
        t = time.perf_counter()
        fn()
        if label:
            print(f"    {label}: warm-up {i + 1} {time.perf_counter() - t:.2f} s", flush=True)
    times = []
    for i in range(repeats):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)
        if label:
            print(f"    {label}: run {i + 1}/{repeats} {times[-1]:.2f} s", flush=True)
    return times


def sampling_shape_args(ap, args) -> None:
    """--quick (batch 4, 64 new tokens, 2 rounds) and the >= 1 checks of the sampling
    benchmarks' shape arguments (batch, prompt_len, new_tokens, repeats)."""
    if args.quick:
        args.batch, args.new_tokens, args.repeats = 4, 64, 2
    for name in ("batch", "prompt_len", "new_tokens", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1.")


def median(xs):
    return statistics.median(xs)


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, device="cpu") -> dict:
    """Measured float32 matmul throughput (GFLOP/s) of an [n, n] @ [n, n] product in JAX (on
    its default device) and in torch (on `device`; None: JAX only), median of `repeats`
    after a warm-up, and the better of the two as `peak`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    flops = 2.0 * n ** 3
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    mm = jax.jit(jnp.matmul)
    t_jax = median(time_runs(lambda: mm(ja, jb).block_until_ready(), repeats))
    out = {"jax": flops / t_jax / 1e9}
    if device is not None:
        ta, tb = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)

        def run():
            with torch.no_grad():
                torch.matmul(ta, tb)
            torch_sync(device)
        out["torch"] = flops / median(time_runs(run, repeats)) / 1e9
    out["peak"] = max(out.values())
    return out


def hf_reference(model, directory: str, attn: str):
    """Save our NNX `model` as an HF dir and load it in transformers, float32, `attn`
    attention ('sdpa' or 'eager'), in eval mode."""
    import torch
    import transformers
    from mle_rl.models import hf

    hf.save(model, directory)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation=attn)
    return ref.eval()
