r"""Multi-host demo: PPO learner updates on a global mesh, then host-local greedy sampling.

Every process runs this same script. Each one builds the same tiny policy and the same
fixed global batch of 8 sequences, feeds only its own rows (`distributed.local_rows`) to
`Learner.update` (the global batch is assembled with `distributed.global_batch`), then copies
the policy onto its own devices (`distributed.to_host_local`) and greedily samples its own
share of 8 prompts. Each process writes the gathered results to `--out` (an .npz; '{process}'
in the path becomes its index):
  policy/<path>, critic/<path>   parameters after `--steps` updates (float32)
  init_policy/<path>             the policy before them
  metrics/<name>                 [steps] learner metrics
  sample_tokens [8, 6] int32, sample_logprobs [8, 6] float32   greedy continuations
  process_count, device_count, min_param_fraction_held (smallest share of a policy
  parameter this process holds: < 1 when parameters are split across processes)

Single process, 4 CPU devices (the reference):
  JAX_PLATFORMS=cpu python experiments/multihost_demo.py --cpu_devices=4 --out=/tmp/ref.npz
Two processes on localhost, 2 CPU devices each (same global mesh of 4):
  for i in 0 1; do JAX_PLATFORMS=cpu python experiments/multihost_demo.py --cpu_devices=2 \
    --coordinator_address=localhost:12355 --num_processes=2 --process_id=$i \
    --out=/tmp/mh{process}.npz & done; wait
`--mode=plumbing` checks only the collectives (global batch, cross-host sum, all-gather onto
host-local devices) in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mle_rl.runtime import distributed as dist  # noqa: E402

BATCH, PROMPT, RESPONSE = 8, 5, 6
NEW_TOKENS = 6


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True,
                   help="the .npz each process writes; '{process}' becomes its index")
    p.add_argument("--coordinator_address", default=None)
    p.add_argument("--num_processes", type=int, default=1)
    p.add_argument("--process_id", type=int, default=0)
    p.add_argument("--cpu_devices", type=int, default=None, help="CPU devices per process")
    p.add_argument("--mesh_shape", default="2,2", help="global data,model mesh shape")
    p.add_argument("--fsdp", action="store_true", help="also shard parameters over data")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--mode", choices=("ppo", "plumbing"), default="ppo",
                   help="ppo: learner updates + sampling; plumbing: only the collectives "
                        "(global batch, cross-host sum, all-gather to host-local), seconds")
    args = p.parse_args(argv)
    try:
        args.mesh_shape = tuple(int(x) for x in args.mesh_shape.split(","))
        assert len(args.mesh_shape) == 2
    except (ValueError, AssertionError):
        p.error(f"--mesh_shape must be two integers like 2,2; got {args.mesh_shape!r}.")
    return args


def fixed_batch(policy, model_cfg):
    """The same global batch on every process: 8 sequences, left and right padding, ±1 reward.

    tokens/attention_mask/response_mask [8, 11] int32, behaviour_logprobs [8, 11] f32 (the
    initial policy's), rewards [8] f32, durations [8] f32.
    """
    import jax.numpy as jnp
    from mle_rl.rl import learner as lrn
    rng = np.random.default_rng(0)
    L = PROMPT + RESPONSE
    tokens = rng.integers(1, model_cfg.vocab_size, (BATCH, L)).astype(np.int32)
    attn = np.ones((BATCH, L), np.int32)
    attn[::3, :2] = 0
    tokens[attn == 0] = 0
    resp = np.zeros((BATCH, L), np.int32)
    resp[:, PROMPT:] = 1
    resp[1::4, -2:] = 0
    attn[1::4, -2:] = 0
    lp = np.asarray(lrn.policy_logprobs(policy, jnp.asarray(tokens), jnp.asarray(attn), 4))
    beh = np.zeros((BATCH, L), np.float32)
    beh[:, 1:] = lp * resp[:, 1:]
    rewards = np.where(np.arange(BATCH) % 2 == 0, 1.0, -1.0).astype(np.float32)
    durations = rng.uniform(0.5, 5.0, BATCH).astype(np.float32)
    return dict(tokens=tokens, attention_mask=attn, response_mask=resp,
                behaviour_logprobs=beh, rewards=rewards, durations=durations)


def _flat(prefix, tree):
    import jax
    return {prefix + jax.tree_util.keystr(path): np.asarray(x, np.float32)
            for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _pin_shardings(learner, mesh) -> None:
    """Keep the train state's shardings fixed across updates (else update 2 recompiles).

    A stand-in, applied here, for the learner.py change proposed with this demo: Learner
    leaves the scalars (step, rng, Adam counts) uncommitted and lets XLA choose the output
    layout, which differs from the input's for some leaves (e.g. FSDP norms), so the second
    update sees new input shardings and compiles again. Harmless once learner.py does this.
    """
    import functools
    import jax
    from jax.sharding import NamedSharding
    from mle_rl.models import sharding as shd
    from mle_rl.rl import learner as lrn
    learner.state = jax.tree.map(
        lambda x: x if isinstance(x.sharding, NamedSharding) else
        jax.device_put(x, shd.replicated(mesh)), learner.state)
    state_shardings = jax.tree.map(lambda x: x.sharding, learner.state)
    learner._update = jax.jit(functools.partial(lrn._ppo_update, learner), donate_argnums=(0,),
                              out_shardings=(state_shardings, shd.replicated(mesh)))


def _held_fraction(x) -> float:
    """Fraction of a global array's elements that this process's devices hold."""
    seen = {tuple((sl.start, sl.stop) for sl in s.index): s.data.size for s in x.addressable_shards}
    return sum(seen.values()) / max(x.size, 1)


def plumbing(args) -> int:
    """Each process feeds rows of a known [8, 3] array; checks what came back; writes .npz."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from mle_rl.models import sharding as shd

    pid = jax.process_index()
    mesh = shd.make_mesh(args.mesh_shape)
    full = np.arange(BATCH * 3, dtype=np.float32).reshape(BATCH, 3)
    rows = dist.local_rows(mesh, BATCH)
    g = dist.global_batch({"x": full[rows]}, mesh)["x"]
    total = jax.jit(jnp.sum, out_shardings=shd.replicated(mesh))(g)     # cross-host reduction
    doubled = dist.fetch(jax.jit(lambda a: 2 * a)(g))                     # all-gather to numpy
    # A parameter split over both axes (as FSDP + TP would), copied onto this host's devices.
    param = jax.make_array_from_callback((BATCH, 4), NamedSharding(mesh, P(shd.DATA, shd.MODEL)),
                                         lambda ix: np.arange(BATCH * 4.0).reshape(BATCH, 4)[ix])
    local_mesh = dist.host_local_mesh(model=min(args.mesh_shape[1], jax.local_device_count()))
    local = dist.to_host_local({"w": param}, local_mesh)["w"]
    dist.barrier("plumbing")
    np.savez(args.out.format(process=pid), global_shape=np.asarray(g.shape),
             rows=np.asarray([rows.start, rows.stop]), total=np.asarray(total),
             doubled=doubled, local_param=np.asarray(local),
             local_param_devices=np.asarray(sorted(d.id for d in local.sharding.device_set)),
             local_devices=np.asarray([d.id for d in jax.local_devices()]),
             process_count=np.int32(jax.process_count()))
    print(f"[process {pid}/{jax.process_count()}] plumbing: rows {rows.start}:{rows.stop}, "
          f"global {g.shape}, sum {float(total)}", flush=True)
    return 0


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    dist.initialize(args, cpu_devices=args.cpu_devices)

    if args.mode == "plumbing":
        return plumbing(args)
    import jax
    from flax import nnx
    from jax.experimental import multihost_utils
    from mle_rl import sampling
    from mle_rl.models import config as mcfg
    from mle_rl.models import qwen2, sharding as shd
    from mle_rl.rl import learner as lrn

    if jax.process_count() > 1 and "distributed" not in lrn.Learner.shard_batch.__code__.co_names:
        # learner.py's shard_batch device_puts the whole numpy batch, which is right only on
        # one process. Until it calls distributed.global_batch itself, patch it here.
        lrn.Learner.shard_batch = lambda self, batch: dist.global_batch(batch, self.mesh,
                                                                        lrn.BATCH_KEYS)
    t0 = time.time()
    pid = jax.process_index()
    model_cfg = mcfg.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                 num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8,
                                 tie_word_embeddings=True)
    policy = qwen2.init_model(model_cfg, seed=4)
    batch = fixed_batch(policy, model_cfg)
    mesh = shd.make_mesh(args.mesh_shape)
    ppo = lrn.PPOConfig(actor_lr=1e-3, critic_lr=1e-3, epochs=2, minibatches=2, critic="shared",
                        logprob_chunk=16)
    learner = lrn.Learner(policy, ppo, mesh=mesh, fsdp=args.fsdp, seed=7)
    _pin_shardings(learner, mesh)

    rows = dist.local_rows(mesh, BATCH)
    local = {k: v[rows] for k, v in batch.items()}
    print(f"[process {pid}/{jax.process_count()}] local devices "
          f"{[d.id for d in jax.local_devices()]}, global devices {[d.id for d in jax.devices()]}, "
          f"mesh {dict(mesh.shape)}, feeds rows {rows.start}:{rows.stop}", flush=True)
    policy0_np = dist.fetch(learner.state.policy)
    metrics = []
    for step in range(args.steps):
        m = learner.update(local)
        metrics.append(m)
        print(f"[process {pid}] step {step + 1}: pg_loss {m['pg_loss']:.6f} "
              f"vf_loss {m['vf_loss']:.6f} ({time.time() - t0:.1f} s)", flush=True)
    held = min(_held_fraction(x) for x in jax.tree.leaves(learner.state.policy))
    policy_np = dist.fetch(learner.state.policy)
    critic_np = dist.fetch(learner.state.critic)

    # Sampling: each host, its own prompts, on its own devices.
    local_mesh = dist.host_local_mesh(model=min(args.mesh_shape[1], jax.local_device_count()))
    sampler_policy = nnx.merge(learner.policy_graph,
                               dist.to_host_local(learner.state.policy, local_mesh))
    prng = np.random.default_rng(1)
    prompts = [list(prng.integers(1, model_cfg.vocab_size, 3 + i % 4)) for i in range(BATCH)]
    per = BATCH // jax.process_count()
    mine = prompts[pid * per:(pid + 1) * per]
    out = sampling.generate(sampler_policy, mine, max_new_tokens=NEW_TOKENS, rng=0,
                            temperature=0.0, mesh=local_mesh)
    tokens, logprobs = out.tokens, out.logprobs
    print(f"[process {pid}] sampled {len(mine)} prompts on {dict(local_mesh.shape)} "
          f"({time.time() - t0:.1f} s)", flush=True)
    if jax.process_count() > 1:   # [P, per, N] -> [P * per, N], in process order
        tokens = np.asarray(multihost_utils.process_allgather(tokens)).reshape(BATCH, -1)
        logprobs = np.asarray(multihost_utils.process_allgather(logprobs)).reshape(BATCH, -1)

    # Every process writes its own copy: the test checks that they agree.
    result = dict(_flat("policy", policy_np), **_flat("critic", critic_np),
                  **_flat("init_policy", policy0_np),
                  sample_tokens=tokens.astype(np.int32),
                  sample_logprobs=logprobs.astype(np.float32),
                  process_count=np.int32(jax.process_count()),
                  device_count=np.int32(jax.device_count()),
                  min_param_fraction_held=np.float32(held))
    for k in metrics[0]:
        result[f"metrics/{k}"] = np.asarray([m[k] for m in metrics], np.float32)
    np.savez(args.out.format(process=pid), **result)
    dist.barrier("multihost_demo_done")   # nobody leaves while another still needs the service
    print(f"[process {pid}] done in {time.time() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
