"""Sampling throughput: `mle_rl.sampling.generate` vs transformers `generate`, same weights.

Our tiny model (`config.tiny()`, random init) is saved with `hf.save` and loaded by
transformers in float32 (`--attn sdpa` by default, or `eager`). Both sides get the same
random prompts (batch 16 x 32 tokens) and produce exactly 512 new tokens per row (HF:
min_new_tokens = max_new_tokens, no EOS; ours: no eos_ids), sampling at temperature 1 with
no top-k / top-p (HF: top_k=0 and top_p=1 explicitly, or transformers applies its default
top_k=50; this leaves HF with no logits processor at all), and greedy with `--greedy`.
Each side runs once to warm up (compile, allocator), then the median of `--repeats` timed
calls is taken. Generated tokens/s =
batch * new tokens / median seconds of one whole generate call (prefill included).
Ours runs the decode path chosen on this machine (`sampling.cpu_decode_path()`, printed
first). On CPU both of our decode paths, the native kernels and XLA, are then timed against
each other: one warm-up call each, then `--repeats` pairs in alternating order, same
prompts and shapes (`--no-paths` skips this).

    python benchmarks/bench_sampling.py            # batch 16, 32-token prompts, 512 new
    python benchmarks/bench_sampling.py --quick    # batch 4, 64 new tokens (smoke test)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import common


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per side (median)")
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa",
                    help="transformers attention implementation")
    ap.add_argument("--greedy", action="store_true", help="also compare greedy decoding")
    ap.add_argument("--split", action="store_true",
                    help="also time our prefill and decode loop separately")
    ap.add_argument("--cores", type=int, default=None,
                    help="pin the process (both sides) to this many cores; default: all")
    ap.add_argument("--quick", action="store_true", help="batch 4, 64 new tokens, 2 repeats")
    ap.add_argument("--device", choices=("cpu", "accelerator"), default="cpu",
                    help="accelerator: ours on JAX's default backend, transformers on CUDA "
                         "(skipped where torch has no CUDA device)")
    ap.add_argument("--preset", default="tiny", help="model preset (random init)")
    ap.add_argument("--malloc", choices=("tcmalloc", "system"), default="tcmalloc",
                    help="allocator of the whole process (both sides); tcmalloc when installed")
    ap.add_argument("--no-paths", action="store_true",
                    help="skip the interleaved A/B of our two CPU decode paths (kernels, XLA)")
    args = ap.parse_args(argv)
    common.sampling_shape_args(ap, args)
    return args


def bench_ours(model, prompts, new_tokens, temperature, repeats):
    from mle_rl import sampling

    def run():
        out = sampling.generate(model, prompts, max_new_tokens=new_tokens, rng=0,
                                temperature=temperature)
        return out

    t = time.perf_counter()
    out = run()  # warm-up: traces and compiles prefill + decode
    print(f"    ours: warm-up (compile) {time.perf_counter() - t:.2f} s", flush=True)
    if not (out.lengths == new_tokens).all():
        raise RuntimeError(f"ours: expected {new_tokens} tokens per row, got {out.lengths}.")
    cpu = []
    wall = common.time_runs(run, repeats, warmup=0, label="ours", cpu=cpu)
    return common.median(wall), common.median(cpu)


def bench_paths(model, prompts, new_tokens, temperature, repeats):
    """Our native-kernel and XLA decode paths, interleaved: one warm-up call each, then
    `repeats` pairs (K X, X K, ...). -> (kernel median s, XLA median s, median pair ratio)."""
    from mle_rl import sampling

    def run(kernels):
        t = time.perf_counter()
        out = sampling.generate(model, prompts, max_new_tokens=new_tokens, rng=0,
                                temperature=temperature, decode_kernel=kernels)
        if not (out.lengths == new_tokens).all():
            raise RuntimeError(f"expected {new_tokens} tokens per row, got {out.lengths}.")
        return time.perf_counter() - t

    for kernels, name in ((True, "kernels"), (False, "XLA")):
        print(f"    {name}: warm-up (compile) {run(kernels):.2f} s", flush=True)
    times = {True: [], False: []}
    for i in range(repeats):
        for kernels in ((True, False) if i % 2 == 0 else (False, True)):
            times[kernels].append(run(kernels))
            print(f"    {'kernels' if kernels else 'XLA'}: pair {i + 1}/{repeats} "
                  f"{times[kernels][-1]:.2f} s", flush=True)
    ratio = common.median([x / k for k, x in zip(times[True], times[False])])
    return common.median(times[True]), common.median(times[False]), ratio


def bench_hf(ref, prompts, new_tokens, temperature, repeats, device="cpu"):
    import torch
    import transformers

    ids = torch.tensor(prompts, dtype=torch.long, device=device)
    gen_cfg = transformers.GenerationConfig(
        do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
        top_k=0, top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        eos_token_id=None, pad_token_id=0, use_cache=True)

    def run():
        with torch.inference_mode():
            out = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                               generation_config=gen_cfg)
        common.torch_sync(device)
        return out

    torch.manual_seed(0)
    t = time.perf_counter()
    out = run()  # warm-up
    print(f"    transformers: warm-up {time.perf_counter() - t:.2f} s", flush=True)
    if out.shape != (ids.shape[0], ids.shape[1] + new_tokens):
        raise RuntimeError(f"transformers: expected {new_tokens} new tokens, got shape "
                           f"{tuple(out.shape)}.")
    cpu = []
    wall = common.time_runs(run, repeats, warmup=0, label="transformers", cpu=cpu)
    return common.median(wall), common.median(cpu)


def bench_split(model, prompts, new_tokens, repeats):
    """Our prefill alone and prefill+decode, so decode time = difference."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from mle_rl import sampling

    graphdef, state = nnx.split(model)
    tokens = jnp.asarray(np.asarray(prompts, np.int32))
    mask = jnp.ones_like(tokens)
    g = sampling.bucket(new_tokens, sampling.MIN_GEN_BUCKET)

    def prefill():
        return jax.block_until_ready(sampling._prefill(graphdef, state, tokens, mask, gen_len=g,
                                                       cache_sharding=None))
    return common.median(common.time_runs(prefill, repeats))


def main(argv=None):
    args = parse_args(argv)
    common.setup_allocator(args.malloc)
    threads = common.setup_threads(args.cores)
    import numpy as np
    from mle_rl.models import config, qwen2

    device, no_ref = common.torch_device(args.device)
    cfg = config.preset(args.preset)
    model = qwen2.init_model(cfg, seed=0)
    ref = None
    if device is not None:
        with tempfile.TemporaryDirectory(prefix="bench_sampling_") as d:
            ref = common.hf_reference(model, d, args.attn).to(device)
    prompts = np.random.default_rng(0).integers(
        1, cfg.vocab_size, (args.batch, args.prompt_len)).tolist()

    print("== sampling benchmark: mle_rl.sampling.generate vs transformers generate ==")
    print(common.machine_report())
    print(common.thread_report())
    print(f"model: {args.preset} ({cfg.num_params / 1e6:.1f}M params, vocab {cfg.vocab_size}), "
          f"float32; HF attention: {args.attn}; torch on {device or '-'}")
    print(f"batch {args.batch} x prompt {args.prompt_len} tokens, {args.new_tokens} new tokens, "
          f"median of {args.repeats} after 1 warm-up, {threads} threads per side")
    chosen = None
    if args.device == "cpu":
        from mle_rl import sampling
        chosen = sampling.cpu_decode_path(announce=False)   # measured here if not cached yet
        print(f"our decode path on this machine: {chosen.line}")
    print()

    modes = [("sample T=1", 1.0)] + ([("greedy", 0.0)] if args.greedy else [])
    n_tok = args.batch * args.new_tokens
    rows = []
    if ref is None:
        print(f"  {no_ref}")
    for name, temp in modes:
        t_hf = c_hf = float("nan")
        if ref is not None:
            t_hf, c_hf = bench_hf(ref, prompts, args.new_tokens, temp, args.repeats, device)
        t_ours, c_ours = bench_ours(model, prompts, args.new_tokens, temp, args.repeats)
        rows.append((name, n_tok / t_ours, n_tok / t_hf, t_hf / t_ours, c_hf / c_ours))
        print(f"  [{name}] ours {t_ours:.3f} s ({c_ours:.3f} CPU s), transformers {t_hf:.3f} s "
              f"({c_hf:.3f} CPU s)", flush=True)

    print(f"\n{'mode':<12}{'ours tok/s':>12}{'HF tok/s':>12}{'ratio':>8}{'CPU-s ratio':>13}")
    for name, ours, theirs, ratio, cpu_ratio in rows:
        print(f"{name:<12}{ours:>12.0f}{theirs:>12.0f}{ratio:>7.2f}x{cpu_ratio:>12.2f}x")
    print(f"\nratio (sample T=1, ours / transformers): {rows[0][3]:.2f}x  (target >= 3.0x, "
          "issue #21)")
    print(f"CPU-seconds ratio (transformers / ours): {rows[0][4]:.2f}x (with --cores 1 this is "
          "robust to other load on the machine)")

    if args.device == "cpu" and not args.no_paths:
        paths_report(model, prompts, args, modes, chosen)

    if args.split:
        t_pre = bench_split(model, prompts, args.new_tokens, args.repeats)
        t_all = args.batch * args.new_tokens / rows[0][1]
        steps = args.new_tokens
        print(f"ours split: prefill {1000 * t_pre:.1f} ms; decode loop "
              f"{1000 * (t_all - t_pre):.0f} ms = {1000 * (t_all - t_pre) / steps:.2f} ms/step")
    return 0


def paths_report(model, prompts, args, modes, chosen):
    """Our two CPU decode paths against each other, interleaved, and the one chosen here."""
    from mle_rl.models import cpu_kernels
    print("\n== our CPU decode paths: native kernels vs XLA (interleaved pairs) ==")
    if not cpu_kernels.available():
        why = cpu_kernels._state.get("error") or f"{cpu_kernels.ENV_SWITCH}=off"
        print(f"  skipped: the native kernels are unavailable here ({why.splitlines()[0]})")
        return
    n_tok = args.batch * args.new_tokens
    rows = []
    for name, temp in modes:
        print(f"  [{name}]", flush=True)
        rows.append((name, *bench_paths(model, prompts, args.new_tokens, temp, args.repeats)))
    print(f"\n{'mode':<12}{'kernels tok/s':>15}{'XLA tok/s':>12}{'kernels / XLA':>15}")
    for name, t_k, t_x, ratio in rows:
        print(f"{name:<12}{n_tok / t_k:>15.0f}{n_tok / t_x:>12.0f}{ratio:>14.2f}x")
    print("(kernels / XLA: the median over pairs of XLA's time / the kernels' time)")
    print(f"chosen on this machine: {chosen.line}")


if __name__ == "__main__":
    sys.exit(main())
