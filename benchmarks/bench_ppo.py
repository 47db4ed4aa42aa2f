"""PPO learner throughput vs a plain supervised step on the same tokens (the PPO overhead),
and the critic-free update (GRPO) vs the GAE one on the same batch.

    python benchmarks/bench_ppo.py [--batch 8] [--prompt 256] [--response 256] [--quick]
                                   [--group_size 4]

Every step runs on the tiny default model, jitted, float32, with donated state. The PPO
update (separate critic = its own trunk copy; 1 epoch, 1 minibatch) does: reference
forward, critic forward, policy forward+backward, critic forward+backward, two AdamW
updates. The GRPO update (`--advantage=grpo`, the batch's rows in groups of
`--group_size`) has no critic: reference forward, policy forward+backward, one AdamW
update. The supervised step does one forward+backward and one AdamW update. For GAE vs
GRPO it prints time per update, the learner's state bytes and the compiled update's peak
memory (XLA's arguments + outputs + temporaries, less what donation aliases), and their
ratios, all from this one run.
"""

import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from mle_rl.models import config as mcfg, qwen2  # noqa: E402
from mle_rl.rl import learner as lrn, losses  # noqa: E402


def make_batch(b, p, r, vocab, seed=0):
    rng = np.random.default_rng(seed)
    L = p + r
    tokens = rng.integers(1, vocab, (b, L)).astype(np.int32)
    attn = np.ones((b, L), np.int32)
    resp = np.zeros((b, L), np.int32)
    resp[:, p:] = 1
    beh = np.where(resp == 1, -np.log(vocab), 0).astype(np.float32)
    return dict(tokens=tokens, attention_mask=attn, response_mask=resp, behaviour_logprobs=beh,
                rewards=rng.normal(size=b).astype(np.float32),
                durations=rng.uniform(1, 10, b).astype(np.float32))


def sft_step_fn(graphdef, tx, chunk):
    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt, tokens, attn, mask):
        def loss_fn(p):
            model = nnx.merge(graphdef, p)
            h, _ = model.hidden_states(tokens[:, :-1], attn[:, :-1])
            lp = losses.chunked_token_logprobs(h, model.lm_head_kernel(), tokens[:, 1:],
                                               chunk_size=chunk)
            m = mask[:, 1:].astype(jnp.float32)
            return -(lp * m).sum() / m.sum()
        loss, g = jax.value_and_grad(loss_fn)(params)
        upd, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, upd), opt, loss
    return step


def timeit(fn, n):
    fn()                                  # compile + warm up
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def footprint(learner, batch) -> dict:
    """State bytes, and the compiled update's peak bytes (XLA's memory analysis)."""
    state = sum(learner.state_bytes().values())
    sharded = learner.shard_batch(batch)
    mem = learner._update.lower(learner.state, sharded).compile().memory_analysis()
    peak = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
            - mem.alias_size_in_bytes) if mem is not None else float("nan")
    return {"state": state, "peak": peak}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--response", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--group_size", type=int, default=4, help="GRPO samples per prompt")
    ap.add_argument("--quick", action="store_true", help="batch 4 x (128 + 128)")
    a = ap.parse_args()
    if a.quick:
        a.batch, a.prompt, a.response = 4, 128, 128
    cfg = mcfg.tiny()
    batch = make_batch(a.batch, a.prompt, a.response, cfg.vocab_size)
    tokens_per_step = a.batch * (a.prompt + a.response)

    batch["group_ids"] = (np.arange(a.batch) // a.group_size).astype(np.int32)
    learner = lrn.Learner(qwen2.init_model(cfg, seed=0), lrn.PPOConfig(logprob_chunk=128))
    gae = {"t": timeit(lambda: learner.update(batch), a.repeats), **footprint(learner, batch)}
    t_ppo = gae["t"]
    del learner
    grpo_learner = lrn.Learner(qwen2.init_model(cfg, seed=0),
                               lrn.PPOConfig(logprob_chunk=128, advantage="grpo"))
    grpo = {"t": timeit(lambda: grpo_learner.update(batch), a.repeats),
            **footprint(grpo_learner, batch)}
    del grpo_learner

    model = qwen2.init_model(cfg, seed=0)
    graphdef, state = nnx.split(model)
    params = jax.tree.map(jnp.copy, nnx.to_pure_dict(state))
    tx = optax.adamw(1e-5)
    holder = {"p": params, "o": tx.init(params)}
    step = sft_step_fn(graphdef, tx, 128)
    t, m, r = (jnp.asarray(batch[k]) for k in ("tokens", "attention_mask", "response_mask"))

    def sft():
        holder["p"], holder["o"], loss = step(holder["p"], holder["o"], t, m, r)
        loss.block_until_ready()
    t_sft = timeit(sft, a.repeats)

    print(f"tiny default ({cfg.num_params / 1e6:.1f}M params), batch {a.batch} x "
          f"({a.prompt} prompt + {a.response} response) tokens, {jax.devices()[0].platform}")
    print(f"{'step':<34}{'s/step':>10}{'tokens/s':>12}")
    print(f"{'PPO update (policy + critic)':<34}{t_ppo:>10.3f}{tokens_per_step / t_ppo:>12.0f}")
    print(f"{'supervised step (reference)':<34}{t_sft:>10.3f}{tokens_per_step / t_sft:>12.0f}")
    print(f"PPO overhead: {t_ppo / t_sft:.2f}x the time of a supervised step "
          f"(throughput ratio {t_sft / t_ppo:.2f})")
    mib = lambda x: f"{x / 2**20:.1f}"
    print(f"\ncritic-free vs GAE, same batch (GRPO groups of {a.group_size})")
    print(f"{'update':<24}{'s/update':>10}{'state MiB':>11}{'peak MiB':>10}")
    for name, r in (("GAE (policy + critic)", gae), ("GRPO (no critic)", grpo)):
        print(f"{name:<24}{r['t']:>10.3f}{mib(r['state']):>11}{mib(r['peak']):>10}")
    print(f"GRPO / GAE: time {grpo['t'] / gae['t']:.2f}x, state bytes "
          f"{grpo['state'] / gae['state']:.2f}x, peak memory {grpo['peak'] / gae['peak']:.2f}x")


if __name__ == "__main__":
    main()
