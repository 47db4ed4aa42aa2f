"""How much memory a run needs per device, from the trainer's own compiled programs.

    python experiments/plan.py --model_preset=qwen2p5_3b --devices=8 --fsdp \\
        --batch_size=128 --max_prompt_tokens=1024 --max_new_tokens=1024 [--minibatches=16]
    python experiments/plan.py --flagfile=experiments/paper/random-acts-of-pizza.flags \\
        --devices=8 --model_preset=qwen2p5_3b

Takes the trainer's flags (`experiments/run.py`'s, flagfiles included) and lowers and
compiles the learner's jitted update (`rl/aot.py`: the real `Learner` on abstract arrays)
and the sampler's jitted prefill, cache growth and last decode phase (`sampling.lower`)
with the shapes and shardings the trainer gives them, on `--devices` fake CPU devices
(`--backend=cpu`, the default) or on this machine's accelerators (`--backend=native`).
No parameter is ever allocated. Memory per device comes from the compiled executables'
`memory_analysis()`:

  update peak  = arguments + outputs + temporaries - aliased (donated state)
  sampler peak = the learner's state (resident while sampling; the sampler reads its
                 policy arrays) + per phase, the largest of: arguments other than the
                 parameters + outputs + temporaries - aliased
  total        = max(update peak, sampler peak)

`params` (policy + critic + reference) and `optimizer` (AdamW moments) are the state's
shard sizes under its shardings; `--nocompile` prints only those (seconds, for any size). The last line printed is one JSON object.

With `--backend=cpu` the devices are this host's memory, and a process holds more than its
arrays. `host` adds what this process measures of its own RSS (tcmalloc keeps what the
compiler frees, and the trainer does not hand it back below `allocator.TRIM_SHARE`):

  tokenizer       loading the policy's tokenizer (--policy_dir, when it is a checkpoint),
                  first, as the trainer does; the code of transformers' tokenizers included
  compile_sampler the RSS the sampler's compiles leave (compiler arenas, code)
  compile_update  the RSS the update's compile adds after them (the trainer's order)
  sampler_kept    the temporaries of the sampler's other phases: within one sampling call
                  nothing is trimmed, and the prefill's freed buffers stay in tcmalloc's
                  cache while the decode steps fault in their own (sizes differ)
  host_sampler    = sampler peak + tokenizer + compile_sampler + sampler_kept
  host_update     = update peak + tokenizer + compile_sampler + compile_update (the trainer
                    trims the sampler's cache when the update starts, see allocator.py)

These are what `benchmarks/bench_real_shapes.py` compares with the trainer's peak RSS above
its baseline. They need the whole model compiled (no --extrapolate_layers: two compiles in
one process share their arenas) and one fake device (the trainer's own programs). XLA:CPU
assigns buffers its own way (its fusions, no GPU/TPU rematerialisation), so temporaries
on an accelerator differ; parameter and optimizer bytes do not. `launch/accelerator_check.sh`
runs this with `--backend=native` against the device's real memory.
"""

import functools
import json
import os
import sys
import tempfile
import time
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from mle_rl import config  # noqa: E402

config.define_flags()
flags.DEFINE_integer("devices", None, "Fake CPU devices to plan for (--backend=cpu; default: "
                     "the product of --mesh_shape, else 8).")
flags.DEFINE_enum("backend", "cpu", ["cpu", "native"], "cpu: fake CPU devices; native: the "
                  "accelerators of this machine, all of them.")
flags.DEFINE_bool("sampler", True, "Also compile the sampler.")
flags.DEFINE_bool("compile", True, "Compile the update (and the sampler). false: only the "
                  "train state's bytes per device (exact, from shapes and shardings, in "
                  "seconds); `total` is then that state alone, a lower bound.")
flags.DEFINE_list("extrapolate_layers", None, "A,B: compile the model with A and B layers "
                  "instead of all, and extrapolate each byte count linearly to its depth "
                  "(for models too slow to compile here; the state is exact either way).")
FLAGS = flags.FLAGS

GIB = 1 << 30
# HBM per chip (GiB); a plan fits when its total is at most FIT_FRACTION of it (XLA's GPU
# client preallocates 75% by default: XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 raises it).
ACCELERATORS = {"A100-40GB": 40, "A100-80GB": 80, "H100-80GB": 80, "H200-141GB": 140,
                "TPU-v5e-16GB": 16, "TPU-v5p-95GB": 95}
FIT_FRACTION = 0.9


def _setup_devices() -> int:
    """Fake CPU devices before any backend starts; -> their number (0: native)."""
    import jax
    if FLAGS.backend == "native":
        return 0
    n = FLAGS.devices
    if n is None:
        n = 8 if not FLAGS.mesh_shape else int(FLAGS.mesh_shape[0]) * int(FLAGS.mesh_shape[1])
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", n)
    return n


@functools.lru_cache(maxsize=None)
def _policy_path():
    """The checkpoint --policy_dir names: a directory, or for `default` the cached default
    policy when it is built and current (plan.py never builds it); else None."""
    import pathlib
    d = FLAGS.policy_dir
    if d == "default":
        from mle_rl.warmstart import pipeline
        path = pipeline.default_policy_dir(FLAGS.cache_dir)
        if pipeline.is_current(path, pipeline.WarmStartSettings()):
            return path
        print(f"[plan] no current default policy under {path} (not built, or out of "
              f"date): planning for "
              f"--model_preset={FLAGS.model_preset} instead", flush=True)
        return None
    return None if d in (None, "random") else pathlib.Path(d)


def _model_config():
    """--policy_dir's config.json when it names a checkpoint and --model_preset is not
    given; else --model_preset."""
    from mle_rl.models import config as mcfg, hf
    path = None if FLAGS["model_preset"].present else _policy_path()
    if path is not None:
        if not (path / "config.json").is_file():
            raise config.ConfigError(f"--policy_dir={FLAGS.policy_dir}: no config.json there; "
                                     f"pass --model_preset=NAME to plan for a preset instead.")
        return hf.read_config(path), str(FLAGS.policy_dir)
    return mcfg.preset(FLAGS.model_preset), FLAGS.model_preset


def _shard_bytes(tree) -> int:
    import jax
    import numpy as np
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
        total += int(np.prod(shape)) * x.dtype.itemsize
    return total


def _memory(compiled) -> dict:
    m = compiled.memory_analysis()
    out = {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
           "temp": m.temp_size_in_bytes, "alias": m.alias_size_in_bytes,
           "code": m.generated_code_size_in_bytes}
    out["peak"] = out["arguments"] + out["outputs"] + out["temp"] - out["alias"]
    return out


def _fits(total: int, limit=None) -> dict:
    fits = {name: total <= FIT_FRACTION * gib * GIB for name, gib in ACCELERATORS.items()}
    if limit:
        fits["this_device"] = total <= limit
    return fits


def _compile(cfg, model_cfg, mesh, dtype, label: str) -> tuple:
    """Compiles the update and (with --sampler) the sampler for `model_cfg` on `mesh`;
    -> (abstract learner, update memory, {phase: sampler memory} or None, compile seconds)."""
    from mle_rl import sampling
    from mle_rl.agent import components
    from mle_rl.rl import aot
    seq_len = cfg.sampling.max_prompt_tokens + cfg.sampling.max_new_tokens
    learner = aot.abstract_learner(model_cfg, cfg.ppo, mesh=mesh, fsdp=cfg.fsdp, dtype=dtype,
                                   seed=cfg.seed)
    # The sampler first, as the trainer compiles them: each compile's RSS growth is measured.
    grown, times, sampler = {}, {}, None
    rss = _rss_bytes()
    if FLAGS.sampler:
        t0 = time.monotonic()
        compiled = sampling.lower(learner.policy(learner.state), batch=cfg.sampling.sample_batch,
                                  prompt_len=cfg.sampling.max_prompt_tokens,
                                  max_new_tokens=cfg.sampling.max_new_tokens,
                                  mesh=components.sample_mesh(mesh), top_p=cfg.sampling.top_p)
        sampler = {name: _memory(c) for name, c in compiled.items()}
        times["sampler"] = round(time.monotonic() - t0, 1)
        now = _rss_bytes()
        grown["compile_sampler"], rss = now - rss, now
        print(f"[plan] {label}: sampler compiled (batch {cfg.sampling.sample_batch}, "
              f"{times['sampler']} s)", flush=True)
    t0 = time.monotonic()
    print(f"[plan] {label}: compiling the update (batch {cfg.buffer.batch_size} x {seq_len} "
          f"tokens, {cfg.ppo.minibatches} minibatch(es))", flush=True)
    update = _memory(aot.lower_update(learner, cfg.buffer.batch_size, seq_len).compile())
    times["update"] = round(time.monotonic() - t0, 1)
    grown["compile_update"] = _rss_bytes() - rss
    print(f"[plan] {label}: update peak {update['peak'] / GIB:.2f} GiB per device "
          f"({times['update']} s to compile)", flush=True)
    return learner, update, sampler, times, grown


def _rss_bytes() -> int:
    """This process's resident memory now (0 where /proc cannot be read)."""
    from mle_rl.runtime.footprint import rss_now
    return int(rss_now().get("rss_mb", 0) * (1 << 20))


def _load_tokenizer() -> tuple:
    """(--policy_dir's tokenizer or None, the RSS loading it added), before any compile, as
    the trainer loads it; the caller keeps it alive through the compiles. The figure includes
    the code of transformers' tokenizers, which the trainer too imports after its baseline."""
    from mle_rl.models import hf
    d = _policy_path()
    if d is None or not (d / "config.json").is_file():
        return None, 0
    before = _rss_bytes()
    tokenizer = hf.load_tokenizer(d)
    return tokenizer, max(0, _rss_bytes() - before)


def _host(update: dict, sampler: Optional[dict], grown: dict, tokenizer: int) -> dict:
    """The host process's predicted peaks (see the module doc)."""
    out = {"tokenizer": tokenizer, **grown}
    fixed = out["tokenizer"] + out.get("compile_sampler", 0)
    if sampler is not None:
        phases = [m for m in sampler.values() if isinstance(m, dict)]
        top = max(phases, key=lambda m: m["peak"])
        out["sampler_kept"] = sum(m["temp"] for m in phases) - top["temp"]
        out["host_sampler"] = sampler["peak"] + fixed + out["sampler_kept"]
    out["host_update"] = update["peak"] + fixed + out["compile_update"]
    return out


def _extrapolate(a: dict, b: dict, la: int, lb: int, layers: int) -> dict:
    """Each byte count of two compiles (at `la` and `lb` layers) on the line through them,
    at `layers`; peaks recomputed from the parts."""
    out = {}
    for k, va in a.items():
        if isinstance(va, dict):
            out[k] = _extrapolate(va, b[k], la, lb, layers)
        else:
            out[k] = int(round(va + (b[k] - va) * (layers - la) / (lb - la)))
    if "arguments" in out:
        out["peak"] = out["arguments"] + out["outputs"] + out["temp"] - out["alias"]
    return out


def plan(cfg, model_cfg, model_name: str, n_fake: int) -> dict:
    import dataclasses
    import jax
    from mle_rl.io.policy import DTYPES
    from mle_rl.models import sharding as shd
    from mle_rl.rl import aot

    mesh = shd.make_mesh(cfg.mesh_shape)
    dtype = DTYPES[cfg.model.dtype]
    # The state is exact at every depth: its shard sizes, from shapes alone.
    state = aot.abstract_learner(model_cfg, cfg.ppo, mesh=mesh, fsdp=cfg.fsdp, dtype=dtype,
                                 seed=cfg.seed).state
    params = _shard_bytes((state.policy, state.critic, state.ref))
    optimizer = _shard_bytes((state.actor_opt, state.critic_opt))
    state_bytes = _shard_bytes(state)
    print(f"[plan] {model_name}: {model_cfg.num_params:,} parameters, {cfg.model.dtype}, "
          f"mesh data={mesh.shape[shd.DATA]} model={mesh.shape[shd.MODEL]}, fsdp={cfg.fsdp}; "
          f"state {state_bytes / GIB:.2f} GiB per device", flush=True)
    host_parts = None
    if not FLAGS.compile:
        update = sampler = None
        times = {}
        method = "state only (not compiled): a lower bound"
    elif FLAGS.extrapolate_layers:
        la, lb = (int(x) for x in FLAGS.extrapolate_layers)
        runs = [_compile(cfg, dataclasses.replace(model_cfg, num_layers=n), mesh, dtype,
                         f"{n} of {model_cfg.num_layers} layers") for n in (la, lb)]
        update = _extrapolate(runs[0][1], runs[1][1], la, lb, model_cfg.num_layers)
        sampler = (_extrapolate(runs[0][2], runs[1][2], la, lb, model_cfg.num_layers)
                   if FLAGS.sampler else None)
        times = {f"{n}_layers": r[3] for n, r in zip((la, lb), runs)}
        method = f"extrapolated from {la}- and {lb}-layer compiles"
    else:
        # On one fake device the devices are this host: its process is measured too, the
        # tokenizer first and kept alive through the compiles (the trainer's order).
        host_applies = n_fake == 1
        tokenizer, tokenizer_bytes = _load_tokenizer() if host_applies else (None, 0)
        _, update, sampler, times, grown = _compile(cfg, model_cfg, mesh, dtype, model_name)
        host_parts = (grown, tokenizer_bytes) if host_applies else None
        del tokenizer
        method = "compiled"
    if sampler is not None:
        # The sampler reads the learner's policy arrays; the rest of the state stays resident.
        policy_bytes = _shard_bytes(state.policy)
        sampler["peak"] = state_bytes + max(m["peak"] - policy_bytes for m in sampler.values())
    total = state_bytes if update is None else max(update["peak"],
                                                   sampler["peak"] if sampler else 0)
    print(f"[plan] total {total / GIB:.2f} GiB per device ({method})", flush=True)
    host = None if host_parts is None else _host(update, sampler, *host_parts)
    if host is not None:
        hs = host.get("host_sampler")
        print(f"[plan] host process: sampler {'-' if hs is None else f'{hs / GIB:.2f} GiB'}, "
              f"update {host['host_update'] / GIB:.2f} GiB (tokenizer "
              f"{host['tokenizer'] / GIB:.2f}, compiles {host.get('compile_sampler', 0) / GIB:.2f}"
              f" + {host['compile_update'] / GIB:.2f})", flush=True)
    limit = None
    if n_fake == 0:
        stats = jax.devices()[0].memory_stats() or {}
        limit = stats.get("bytes_limit")
    return {
        "model": model_name, "num_params": model_cfg.num_params, "dtype": cfg.model.dtype,
        "devices": jax.device_count(),
        "platform": f"cpu ({n_fake} fake devices)" if n_fake else jax.devices()[0].device_kind,
        "mesh": {"data": mesh.shape[shd.DATA], "model": mesh.shape[shd.MODEL]},
        "fsdp": cfg.fsdp, "advantage": getattr(cfg.ppo, "advantage", "gae"),
        "critic": None if state.critic is None else cfg.ppo.critic,
        "batch_size": cfg.buffer.batch_size,
        "seq_len": cfg.sampling.max_prompt_tokens + cfg.sampling.max_new_tokens,
        "minibatches": cfg.ppo.minibatches, "sample_batch": cfg.sampling.sample_batch,
        "method": method,
        "per_device_bytes": {"params": params, "optimizer": optimizer, "state": state_bytes,
                             "update": update, "sampler": sampler, "total": total},
        "host_bytes": host, "device_bytes_limit": limit, "fit_fraction": FIT_FRACTION,
        "fits": _fits(total, limit), "compile_s": times,
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    n_fake = _setup_devices()
    if FLAGS.workdir is None:
        FLAGS.workdir = tempfile.mkdtemp(prefix="mle_rl_plan_")   # from_flags needs one
    try:
        cfg = config.from_flags(FLAGS)
        model_cfg, name = _model_config()
    except config.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if FLAGS.extrapolate_layers:
        try:
            la, lb = (int(x) for x in FLAGS.extrapolate_layers)
        except ValueError:
            la = lb = 0
        if not 1 <= la < lb:
            print(f"error: --extrapolate_layers needs two depths 1 <= A < B, got "
                  f"{','.join(FLAGS.extrapolate_layers)}.", file=sys.stderr)
            return 2
    import jax
    n = jax.device_count()
    if cfg.mesh_shape and cfg.mesh_shape[0] * cfg.mesh_shape[1] != n:
        print(f"error: --mesh_shape={','.join(map(str, cfg.mesh_shape))} needs "
              f"{cfg.mesh_shape[0] * cfg.mesh_shape[1]} devices, this plan has {n} "
              f"(--devices).", file=sys.stderr)
        return 2
    data = n // (cfg.mesh_shape or (n, 1))[1]
    rows = cfg.buffer.batch_size // cfg.ppo.minibatches
    if rows % data:
        print(f"warning: a minibatch of {rows} rows does not split evenly over the {data} "
              f"devices of the data axis (--batch_size / --minibatches).", file=sys.stderr)
    print(json.dumps(plan(cfg, model_cfg, name, n_fake)))
    return 0


if __name__ == "__main__":
    from mle_rl.runtime import allocator
    allocator.reexec_with_tcmalloc()   # the trainer's allocator, which the host figures assume
    app.run(main)
