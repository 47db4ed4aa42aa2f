"""Training throughput: our jitted NNX + optax step vs the same model in PyTorch eager, float32.

One step = forward + backward + AdamW update on a batch of random tokens [B, T] with the
next-token cross-entropy (logits of positions 0..T-2 against tokens 1..T-1, mean over
B * (T-1) targets). Same weights on both sides (our tiny model, `hf.save`d and loaded by
transformers, float32, `--attn sdpa` by default). Ours: `nnx.split` state + `optax.adamw`,
the whole step one `jax.jit` with params and optimizer state donated; the loss uses the
library's `losses.chunked_token_logprobs` (what SFT and PPO use) with one chunk per
sequence. Reference: `transformers` Qwen2ForCausalLM in eager mode with `torch.optim.AdamW` (same lr, betas, eps,
weight decay). Tokens/s = B * T / median step seconds (after one warm-up step).

MFU = achieved model FLOP/s / measured matmul peak (float32 [2048, 2048] @ [2048, 2048],
better of JAX and torch, measured in the same run). Model FLOPs per token (training =
3 x forward):
    6 * N_mm + 12 * L * (H * hd) * T
N_mm = matmul parameters = L * (D*H*hd + 2*D*KV*hd + H*hd*D + 3*D*F) + D*V (the LM head
counts, it is a real matmul; the embedding lookup and norms/biases do not). The attention
term counts QK^T and PV over the full T x T square (what both implementations compute).

    python benchmarks/bench_train.py            # batch 8 x 512, 3 timed steps
    python benchmarks/bench_train.py --quick    # batch 2 x 128 (smoke test)
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import common


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per side (median)")
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa",
                    help="transformers attention implementation")
    ap.add_argument("--cores", type=int, default=None,
                    help="pin the process (both sides) to this many cores; default: all")
    ap.add_argument("--quick", action="store_true", help="batch 2 x 128, 3 timed steps")
    ap.add_argument("--device", choices=("cpu", "accelerator"), default="cpu",
                    help="accelerator: ours on JAX's default backend, torch on CUDA "
                         "(skipped where torch has no CUDA device)")
    ap.add_argument("--preset", default="tiny", help="model preset (random init)")
    ap.add_argument("--malloc", choices=("tcmalloc", "system"), default="tcmalloc",
                    help="allocator of the whole process (both sides); tcmalloc when installed")
    args = ap.parse_args(argv)
    if args.quick:
        args.batch, args.seq, args.steps = 2, 128, 3
    for name in ("batch", "seq", "steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1.")
    if args.seq < 2:
        ap.error("--seq must be >= 2 (next-token loss needs two positions).")
    return args


LR, BETAS, EPS, WD = 1e-4, (0.9, 0.999), 1e-8, 0.01


def flops_per_token(cfg, seq: int) -> float:
    """Training FLOPs per token: 6 * N_mm + 12 * L * (H * hd) * T (see module docstring)."""
    d, f, v, hd = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.head_dim
    q, kv = cfg.num_heads * hd, cfg.num_kv_heads * hd
    n_mm = cfg.num_layers * (d * q + 2 * d * kv + q * d + 3 * d * f) + d * v
    return 6.0 * n_mm + 12.0 * cfg.num_layers * q * seq


def jax_step_fn(model):
    """(step, params, opt_state): step(params, opt_state, tokens [B, T] int32) ->
    (params, opt_state, loss), one jit with params and opt_state donated."""
    import jax
    import optax
    from flax import nnx
    from mle_rl.rl import losses

    graphdef, params = nnx.split(model)
    tx = optax.adamw(LR, b1=BETAS[0], b2=BETAS[1], eps=EPS, weight_decay=WD)
    opt_state = tx.init(params)

    def loss_fn(params, tokens):
        # The library's token log-probs (SFT and PPO use them), one chunk per sequence.
        model = nnx.merge(graphdef, params)
        h, _ = model.hidden_states(tokens)                              # all T, as torch
        logp = losses.chunked_token_logprobs(h[:, :-1], model.lm_head_kernel(), tokens[:, 1:],
                                             chunk_size=tokens.shape[1])
        return -logp.mean()

    @jax.jit
    def loss_only(params, tokens):
        return loss_fn(params, tokens)

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1)), loss_only, params, opt_state


def bench_ours(model, tokens_np, steps):
    import jax
    import jax.numpy as jnp

    step, loss_only, params, opt_state = jax_step_fn(model)
    tokens = jnp.asarray(tokens_np)
    loss0 = float(loss_only(params, tokens))
    state = {"p": params, "o": opt_state}

    def run():
        state["p"], state["o"], loss = step(state["p"], state["o"], tokens)
        state["loss"] = jax.block_until_ready(loss)

    cpu = []
    times = common.time_runs(run, steps, warmup=1, label="ours", cpu=cpu)
    return common.median(times), common.median(cpu), loss0, float(state["loss"])


def bench_torch(ref, tokens_np, steps, device="cpu"):
    import torch
    import torch.nn.functional as F

    ids = torch.from_numpy(tokens_np).long().to(device)
    ref.train()
    opt = torch.optim.AdamW(ref.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    v = ref.config.vocab_size

    def loss_fn():
        logits = ref(input_ids=ids).logits                               # [B, T, V] f32
        return F.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))

    with torch.no_grad():
        loss0 = float(loss_fn())
    last = {}

    def run():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        last["loss"] = float(loss.detach())       # synchronises with the device

    cpu = []
    times = common.time_runs(run, steps, warmup=1, label="torch", cpu=cpu)
    return common.median(times), common.median(cpu), loss0, last["loss"]


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
        with tempfile.TemporaryDirectory(prefix="bench_train_") as d:
            ref = common.hf_reference(model, d, args.attn).to(device)
    tokens = np.random.default_rng(0).integers(
        0, cfg.vocab_size, (args.batch, args.seq)).astype(np.int32)

    print("== training benchmark: jitted NNX + optax step vs PyTorch eager + AdamW ==")
    print(common.machine_report())
    print(common.thread_report())
    print(f"model: {args.preset} ({cfg.num_params / 1e6:.1f}M params, vocab {cfg.vocab_size}), "
          f"float32; HF attention: {args.attn}; torch on {device or '-'}")
    print(f"batch {args.batch} x {args.seq} tokens, median of {args.steps} steps after 1 warm-up, "
          f"{threads} threads per side\n", flush=True)

    peak = common.matmul_peak_gflops(device=device)
    print(f"matmul peak (f32 2048^3): jax {peak['jax']:.1f}, torch {peak.get('torch', 0):.1f} "
          f"GFLOP/s -> peak {peak['peak']:.1f} GFLOP/s", flush=True)

    t_torch = c_torch = l0_torch = l1_torch = float("nan")
    if ref is None:
        print(f"  {no_ref}")
    else:
        t_torch, c_torch, l0_torch, l1_torch = bench_torch(ref, tokens, args.steps, device)
        print(f"  torch eager: {t_torch:.3f} s/step (loss {l0_torch:.4f} -> {l1_torch:.4f})",
              flush=True)
    del ref
    t_ours, c_ours, l0_ours, l1_ours = bench_ours(model, tokens, args.steps)
    print(f"  ours (jit):  {t_ours:.3f} s/step (loss {l0_ours:.4f} -> {l1_ours:.4f})", flush=True)
    if abs(l0_ours - l0_torch) > 1e-3 * max(1.0, abs(l0_torch)):
        print(f"WARNING: initial losses differ ({l0_ours} vs {l0_torch}): not the same model?")

    n_tok = args.batch * args.seq
    fpt = flops_per_token(cfg, args.seq)
    print(f"\nmodel FLOPs/token = 6*N_mm + 12*L*(H*hd)*T = {fpt / 1e6:.1f} MFLOP "
          f"({fpt * n_tok / 1e9:.0f} GFLOP per step)")
    print(f"\n{'side':<14}{'tok/s':>10}{'GFLOP/s':>10}{'MFU':>8}")
    for name, t in (("ours (jax)", t_ours), ("torch eager", t_torch)):
        gf = fpt * n_tok / t / 1e9
        print(f"{name:<14}{n_tok / t:>10.0f}{gf:>10.1f}{100 * gf / peak['peak']:>7.1f}%")
    print(f"\nratio (tokens/s, ours / torch eager): {t_torch / t_ours:.2f}x  (target >= 1.0x)")
    print(f"CPU seconds per step (process, all threads): ours {c_ours:.3f}, torch {c_torch:.3f}"
          f" -> ratio {c_torch / c_ours:.2f}x (with --cores 1 this is robust to other load on "
          "the machine; with more cores idle-spinning threads count too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
