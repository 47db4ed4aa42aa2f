"""The learner's update on abstract arrays, for lowering ahead of time (`experiments/plan.py`).

    learner = aot.abstract_learner(model_config, ppo_config, mesh=mesh, fsdp=True,
                                   dtype=jnp.bfloat16)
    compiled = aot.lower_update(learner, batch_size=128, seq_len=2048).compile()
    compiled.memory_analysis()        # bytes per device: arguments, outputs, temporaries

`abstract_learner` runs the real `Learner.__init__` under `jax.eval_shape` on the
`nnx.eval_shape` of the policy's init, so no parameter, optimizer moment or reference copy
is ever allocated, and gives the learner that `TrainState`'s shapes with the shardings the
concrete path puts on it: parameters by `models.sharding`, each optimizer moment like its
parameter (`optax.tree_map_params`), everything else (Adam counts, step, rng, β)
replicated. Its update is `ppo_update` jitted as `Learner` jits it (donated state,
outputs keep the inputs' shardings), so the lowered program is the trainer's
(tests/test_plan.py compares the two lowerings' text).

What this relies on in `rl/learner.py` / `rl/ppo_update.py` (change them together):
  * `Learner(policy, cfg, mesh=None, seed=...)` traces under `jax.eval_shape` (no host
    reads of parameter values in `__init__`);
  * `learner.state` is a `TrainState` NamedTuple whose `policy`, `ref`, `critic` are pure
    dicts of the policy's / critic's `nnx.State` (`critic` and `critic_opt` None when
    critic-free), `actor_opt` / `critic_opt` the `actor_tx` / `critic_tx` optax states,
    every other non-None field replicated;
  * `learner.critic_graph`, `learner.actor_tx`, `learner.critic_tx`, `learner.cfg.batch_keys`
    (each key in BATCH_SPECS), `learner.policy(state)`, and `learner.mesh` / `.fsdp` /
    `._update` being plain attributes that may be replaced;
  * `ppo_update(learner, state, batch)` as the jitted update, donated state (argnum 0),
    outputs = (state with the inputs' shardings, replicated metrics).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mle_rl.models import qwen2
from mle_rl.models import sharding as shd
from mle_rl.models.config import ModelConfig
from mle_rl.rl.learner import Learner, PPOConfig
from mle_rl.rl.ppo_update import ppo_update

# Shapes and dtypes of an update's batch rows ([B, L] or [B]), as `agent/buffer.collate`
# makes them.
BATCH_SPECS = {"tokens": (2, jnp.int32), "attention_mask": (2, jnp.int32),
               "response_mask": (2, jnp.int32), "behaviour_logprobs": (2, jnp.float32),
               "rewards": (1, jnp.float32), "durations": (1, jnp.float32),
               "group_ids": (1, jnp.int32), "valid": (1, jnp.float32)}


def abstract_policy(cfg: ModelConfig, dtype=jnp.float32) -> qwen2.Qwen2:
    """The policy as `policy.load` builds it (parameters and compute in `dtype`), with a
    `jax.ShapeDtypeStruct` in place of every parameter."""
    return nnx.eval_shape(lambda: qwen2.init_model(cfg, dtype=dtype, param_dtype=dtype))


def abstract_learner(cfg: ModelConfig, ppo: PPOConfig, *, mesh, fsdp: bool = False,
                     dtype=jnp.float32, seed: int = 0) -> Learner:
    """A `Learner` whose `state` is abstract (shapes, dtypes, shardings on `mesh`)."""
    graphdef, params = nnx.split(abstract_policy(cfg, dtype))
    built = []

    def init(params):
        learner = Learner(nnx.merge(graphdef, params), ppo, mesh=None, seed=seed)
        built.append(learner)
        return learner.state

    shapes = jax.eval_shape(init, params)
    learner = built[0]
    learner.mesh, learner.fsdp = mesh, fsdp
    learner.state = _with_shardings(learner, shapes, params, mesh, fsdp)
    out_shardings = (jax.tree.map(lambda x: x.sharding, learner.state), shd.replicated(mesh))
    learner._update = jax.jit(functools.partial(ppo_update, learner), donate_argnums=(0,),
                              out_shardings=out_shardings)
    return learner


def _with_shardings(learner: Learner, shapes, params: nnx.State, mesh, fsdp: bool):
    rep = shd.replicated(mesh)
    policy_sh = nnx.to_pure_dict(shd.param_shardings(params, mesh, fsdp))
    critic_sh = None
    if shapes.critic is not None:
        critic_state = nnx.split(nnx.merge(learner.critic_graph, shapes.critic))[1]
        critic_sh = nnx.to_pure_dict(shd.param_shardings(critic_state, mesh, fsdp))

    def opt(tx, state, param_shardings):
        if state is None:
            return None
        return optax.tree_map_params(tx, lambda _, s: s, state, param_shardings,
                                     transform_non_params=lambda _: rep)

    shardings = shapes._replace(
        policy=policy_sh, ref=policy_sh, critic=critic_sh,
        actor_opt=opt(learner.actor_tx, shapes.actor_opt, policy_sh),
        critic_opt=opt(learner.critic_tx, shapes.critic_opt, critic_sh),
        **{k: rep for k in shapes._fields
           if k not in ("policy", "ref", "critic", "actor_opt", "critic_opt")
           and getattr(shapes, k) is not None})
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        shapes, shardings)


def abstract_batch(keys, batch_size: int, seq_len: int, mesh) -> dict:
    """`jax.ShapeDtypeStruct`s of a batch, split over `data` as `Learner.shard_batch` does."""
    out = {}
    for k in keys:
        if k not in BATCH_SPECS:
            raise ValueError(f"abstract_batch: no shape known for batch key {k!r}; add it to "
                             f"aot.BATCH_SPECS.")
        rank, dtype = BATCH_SPECS[k]
        shape = (batch_size, seq_len)[:rank]
        out[k] = jax.ShapeDtypeStruct(shape, dtype, sharding=shd.batch_sharding(mesh, rank))
    return out


def lower_update(learner: Learner, batch_size: int, seq_len: int):
    """The update lowered for `batch_size` sequences of `seq_len` tokens (`.compile()`)."""
    batch = abstract_batch(learner.cfg.batch_keys, batch_size, seq_len, learner.mesh)
    return learner._update.lower(learner.state, batch)
