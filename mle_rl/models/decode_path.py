"""Which path decodes float32 sampling on one CPU device here: the native kernels or XLA.

The native decode kernels (`cpu_kernels.py`) were 1.53x as fast as the XLA path on one
machine and 0.7-1.0x on a 2-core AMD EPYC, so neither is the default everywhere. With
`MLE_RL_CPU_KERNELS=auto` (the default) each machine measures, once:

* When: the first time a process samples (or `sampling.cpu_decode_path()` is called) with
  the kernels built or found in the cache and no decision cached for them yet.
* What: `measure()`, an interleaved A/B of whole `generate` calls at temperature 1 (as RL
  samples; no EOS, so both paths decode the same number of steps) of the CPU default model
  (`config.tiny()`, random weights, seed 0), batch 8 x 128-token prompts, 64 new tokens
  (one decode phase), through each path: one warm-up call per path (compiles), then
  PAIRS pairs in alternating order (K X, X K, K X), and more (up to MAX_PAIRS, or
  PAIR_BUDGET_S of timed calls) while the pairs disagree about the winner; the speedup is
  the median over pairs of XLA's wall time / the kernels'. ~15-20 s on 2 idle cores, about
  half of it compiling (30-45 s on a loaded machine). The kernels are chosen when they are
  at least MIN_SPEEDUP times as fast as XLA (native code has to earn its place).
* Where: a JSON file beside the library in the kernel cache,
  `cpu_kernels-<library hash>-<cores>cpu.decode-path.json`, written atomically (temporary
  file + rename) under a file lock: of processes deciding at once (pytest-xdist workers,
  several trainers), one measures and the others wait for its file (a waiting process
  takes no CPU, so it does not skew the measurement). The library's hash covers the kernel
  source, compiler, flags, jaxlib and CPU flags; the file holds a key that adds the number
  of cores this process may run on, the jax version and the measurement's settings. A new
  library, or a file that is unreadable, partial or has another key, decides again. Delete
  the file to measure again (e.g. if it was decided under heavy load: its load is in it).
* Told once per process (a WARNING of this logger): which path, the measured ratio, when it
  was decided, the file.

`MLE_RL_CPU_KERNELS=1|on` uses the kernels whenever they build and `0|off` the XLA path,
with no measurement; `sampling.CPU_DECODE_KERNEL = True|False` and `generate(...,
decode_kernel=True|False)` force a path from code (the measurement forces each path that
way, so it never recurses). No kernels (no compiler, a failed build): the XLA path, nothing
measured or cached.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import jax
import numpy as np

from mle_rl.models import cpu_kernels

log = logging.getLogger(__name__)

MIN_SPEEDUP = 1.05     # kernels chosen when the median of XLA / kernel time >= this
BATCH, PROMPT_LEN, NEW_TOKENS = 8, 128, 64   # batch 8: the --sample_batch default
PAIRS, MAX_PAIRS, PAIR_BUDGET_S = 3, 9, 12.0  # pairs: at least; more while they disagree
MEASURE_VERSION = 1    # bump when measure() changes: every machine decides again
FORCE_HINT = f"{cpu_kernels.ENV_SWITCH}=on|off forces a path"


@dataclasses.dataclass(frozen=True)
class Choice:
    """kernels: True when the native kernels decode. how: 'measured' (now), 'cached',
    'forced' (by the environment or by code), 'unavailable' (the kernels do not build or
    load here), 'failed' (the measurement raised: XLA, nothing cached). line: one line
    saying which path and why. record / file: the decision file's content and path."""
    kernels: bool
    how: str
    line: str
    record: Optional[dict] = None
    file: Optional[Path] = None


_lock = threading.Lock()
_choices: dict = {}       # (switch, code force) -> Choice, once per process
_announced: set = set()


def choose(generate: Callable, force: Optional[bool] = None, announce: bool = True) -> Choice:
    """The decode path of this process for float32 sampling on one CPU device.
    generate: `sampling.generate` (measured through its `decode_kernel=` argument).
    force: True/False set by code (`sampling.CPU_DECODE_KERNEL`), None: the environment.
    announce: log the choice (once per process and setting)."""
    mode = cpu_kernels.switch()
    with _lock:
        setting = (mode, force)
        choice = _choices.get(setting)
        if choice is None:
            choice = _choices[setting] = _decide(mode, force, generate)
        if announce and setting not in _announced:
            _announced.add(setting)
            auto = choice.how in ("measured", "cached", "failed")
            log.log(logging.WARNING if auto else logging.INFO, "mle_rl: CPU decode path: %s",
                    choice.line)
    return choice


def _decide(mode: str, force: Optional[bool], generate: Callable) -> Choice:
    if force is False or (force is None and mode == "off"):
        why = "sampling.CPU_DECODE_KERNEL = False" if force is False else \
            f"{cpu_kernels.ENV_SWITCH}={os.environ.get(cpu_kernels.ENV_SWITCH)}"
        return Choice(False, "forced", f"XLA ({why})")
    if not cpu_kernels.available():
        why = (cpu_kernels._state.get("error") or f"{cpu_kernels.ENV_SWITCH}=off")
        return Choice(False, "unavailable", "XLA (the native kernels are unavailable here: "
                      f"{_short(why)})")
    if force or mode == "on":
        why = "sampling.CPU_DECODE_KERNEL = True" if force else \
            f"{cpu_kernels.ENV_SWITCH}={os.environ.get(cpu_kernels.ENV_SWITCH)}"
        return Choice(True, "forced", f"native kernels ({why})")
    path, key = decision_file(), decision_key()
    record = read_decision(path, key)
    if record is not None:
        return _choice(record, "cached", path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".decide.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # released when the file is closed
        record = read_decision(path, key)       # decided by another process while we waited
        if record is not None:
            return _choice(record, "cached", path)
        log.warning("mle_rl: measuring the CPU decode paths on this machine (native kernels "
                    "vs XLA, ~15-45 s, once; cached in %s)", path)
        try:
            record = decision(measure(generate), key)
        except Exception as e:  # noqa: BLE001 - a failed measurement means "use XLA"
            return Choice(False, "failed", "XLA (measuring the native kernels against it "
                          f"failed: {type(e).__name__}: {_short(str(e))}; not cached)")
        write_decision(path, record)
    return _choice(record, "measured", path)


def _short(text: str, n: int = 160) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= n else line[:n] + "..."


def _choice(record: dict, how: str, path: Path) -> Choice:
    kernels = record["path"] == "kernels"
    ratio = f"{record['speedup']:.2f}x"
    what = (f"native kernels ({ratio} the XLA path's speed on this CPU" if kernels
            else f"XLA (the native kernels ran at {ratio} its speed on this CPU")
    when = "measured now" if how == "measured" else f"decided {record['decided']}"
    load = record.get("load")
    load = f" at load {load[0]:.1f}" if isinstance(load, list) and load else ""
    return Choice(kernels, how, f"{what}; {when}{load}, cached in {path}; {FORCE_HINT})",
                  record, path)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def decision_file() -> Path:
    """Beside the loaded library: `<library stem>-<cores>cpu.decode-path.json`."""
    lib = Path(cpu_kernels.library_path())
    return lib.with_name(f"{lib.stem}-{cores()}cpu.decode-path.json")


def decision_key() -> str:
    return (f"{Path(cpu_kernels.library_path()).name} cores={cores()} jax={jax.__version__} "
            f"measure=v{MEASURE_VERSION}:b{BATCH}p{PROMPT_LEN}n{NEW_TOKENS}x{PAIRS}-{MAX_PAIRS} "
            f"min_speedup={MIN_SPEEDUP}")


def read_decision(path: Path, key: str) -> Optional[dict]:
    """The decision in `path` when it is complete and made for `key`; else None."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = None
    if valid(record, key):
        return record
    if path.exists():
        log.info("mle_rl: %s is unreadable, partial or for another key: deciding again", path)
    return None


def valid(record, key: str) -> bool:
    """A complete decision record made for `key`."""
    return (isinstance(record, dict) and record.get("key") == key
            and record.get("path") in ("kernels", "xla")
            and isinstance(record.get("speedup"), (int, float))
            and math.isfinite(record["speedup"]) and isinstance(record.get("decided"), str))


def write_decision(path: Path, record: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def decision(times: dict, key: str) -> dict:
    """The decision record of `measure()`'s times. speedup: the median over pairs of XLA's
    time / the kernels' time (the two calls of a pair ran back to back, under about the
    same load, which a ratio of the two medians would not compare)."""
    k, x = float(np.median(times["kernel_s"])), float(np.median(times["xla_s"]))
    speedup = float(np.median(np.asarray(times["xla_s"]) / np.asarray(times["kernel_s"])))
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = None
    return {"key": key, "path": "kernels" if speedup >= MIN_SPEEDUP else "xla",
            "speedup": round(speedup, 3), "kernel_median_s": round(k, 4),
            "xla_median_s": round(x, 4), **times, "min_speedup": MIN_SPEEDUP,
            "decided": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": load,
            "cores": cores()}


def measure(generate: Callable, cfg=None, batch: int = BATCH, prompt_len: int = PROMPT_LEN,
            new_tokens: int = NEW_TOKENS, pairs: int = PAIRS, max_pairs: int = MAX_PAIRS,
            budget_s: float = PAIR_BUDGET_S) -> dict:
    """Interleaved A/B of whole `generate` calls (temperature 1, no EOS: every call decodes
    `new_tokens` steps) through the kernels and XLA, same model, prompts and shapes (`cfg`:
    default `config.tiny()`, random weights): one warm-up call each, then `pairs` pairs
    (K X, X K, ...), and more, up to `max_pairs` or `budget_s` seconds of timed calls,
    while the pairs disagree (XLA / kernel time on both sides of MIN_SPEEDUP: a noisy,
    loaded machine). -> {"kernel_s": [...], "xla_s": [...] (timed calls, seconds),
    "warmup_s": {"kernels", "xla"} (compiling), "shape", "seconds" (all of it)}."""
    from mle_rl.models import config as mcfg
    from mle_rl.models import qwen2
    start = time.perf_counter()
    cfg = cfg or mcfg.tiny()
    with jax.default_device(jax.devices("cpu")[0]):
        model = qwen2.init_model(cfg, seed=0)
        prompts = np.random.default_rng(0).integers(1, cfg.vocab_size,
                                                    (batch, prompt_len)).tolist()

        def call(kernels: bool) -> float:
            t = time.perf_counter()
            out = generate(model, prompts, max_new_tokens=new_tokens, rng=0, temperature=1.0,
                           decode_kernel=kernels)
            np.asarray(out.tokens)
            return time.perf_counter() - t

        warmup = {"kernels": round(call(True), 3), "xla": round(call(False), 3)}
        times, timed = {True: [], False: []}, time.perf_counter()
        for i in range(max(pairs, max_pairs)):
            for kernels in ((True, False) if i % 2 == 0 else (False, True)):
                times[kernels].append(max(call(kernels), 1e-9))
            wins = {x / k >= MIN_SPEEDUP for k, x in zip(times[True], times[False])}
            if i + 1 >= pairs and (len(wins) == 1 or time.perf_counter() - timed > budget_s):
                break
    return {"kernel_s": [round(t, 4) for t in times[True]],
            "xla_s": [round(t, 4) for t in times[False]], "warmup_s": warmup,
            "shape": {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
                      "pairs": len(times[True]), "model": f"{cfg.num_params / 1e6:.1f}M params"},
            "seconds": round(time.perf_counter() - start, 1)}
