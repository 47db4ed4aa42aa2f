"""SFT: prompt tokens are masked out of the loss; the loss goes down in a few steps."""

import dataclasses
import random

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mle_rl.models.config import ModelConfig
from mle_rl.models import qwen2
from mle_rl.warmstart import sft, sft_data


def _small(vocab=64):
    return ModelConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=2, num_kv_heads=1, head_dim=16, rope_theta=10000.0,
                       tie_word_embeddings=True, max_position_embeddings=128)


def _rows(n=8, seed=0):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        p = [rng.randrange(3, 64) for _ in range(rng.randrange(4, 9))]
        r = [5, 6, 7, 8, 9, 10, 2]                      # a fixed response to memorize
        rows.append(("solve", p, r))
    return rows


def test_loss_mask_marks_exactly_the_response():
    b = sft_data.make_batch([("solve", [11, 12, 13], [21, 22, 2])], length=8, batch=2, pad_id=0)
    assert b["tokens"][0, :5].tolist() == [11, 12, 13, 21, 22]
    assert b["targets"][0, :5].tolist() == [12, 13, 21, 22, 2]
    assert b["loss_mask"][0].tolist() == [0, 0, 1, 1, 1, 0, 0, 0]
    assert b["loss_mask"][1].sum() == 0 and b["mask"][1].sum() == 0


def test_prompt_targets_get_no_gradient():
    model = qwen2.init_model(_small(), seed=0)
    graphdef, params = nnx.split(model)
    b = sft_data.make_batch(_rows(2), length=16, batch=2, pad_id=0)
    b = {k: jnp.asarray(v) for k, v in b.items()}
    fn = jax.jit(jax.value_and_grad(lambda p, bb: sft.sft_loss(p, graphdef, bb, 8)[0]))
    l1, g1 = fn(params, b)
    # change every target outside the response: loss and gradients must not move
    other = jnp.where(b["loss_mask"] > 0, b["targets"], (b["targets"] + 17) % 64)
    l2, g2 = fn(params, {**b, "targets": other})
    assert float(l1) > 0
    assert float(l1) == float(l2)
    for a, c in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_loss_goes_down_in_a_few_steps():
    model = qwen2.init_model(_small(), seed=0)
    cfg = sft.SFTConfig(lr=1e-2, warmup_steps=1, max_epochs=10, time_budget_s=600,
                        tokens_per_batch=96, buckets=(16,), eval_every=1000)
    rows = _rows(8)
    hist = sft.train(model, rows[:6], rows[6:], cfg, pad_id=0, log=lambda *a: None)
    first, last = hist["eval"][0][1], hist["eval"][-1][1]
    assert last < 0.5 * first, (first, last)
    assert hist["train_loss"][-1] < hist["train_loss"][0]


def test_lr_schedule_warms_up_and_decays():
    cfg = sft.SFTConfig(lr=1.0, warmup_steps=4, max_steps=None)     # over the time budget
    assert sft.lr_at(cfg, 0, 0.0) == 0.25
    assert sft.lr_at(cfg, 10, 0.0) == 1.0
    assert abs(sft.lr_at(cfg, 10, 1.0) - 0.1) < 1e-9
    steps = sft.SFTConfig(lr=1.0, warmup_steps=4, max_steps=100)    # over the steps
    assert sft.lr_at(steps, 0, 0.9) == 0.25
    assert abs(sft.lr_at(steps, 50, 0.0) - 0.55) < 1e-9           # half-way: (1 + 0.1) / 2
    assert abs(sft.lr_at(steps, 100, 0.0) - 0.1) < 1e-9
    assert sft.lr_at(steps, 10, 0.9) == sft.lr_at(steps, 10, 0.0)  # the clock plays no part


def test_training_stops_at_max_steps_whatever_the_time_budget():
    model = qwen2.init_model(_small(), seed=0)
    cfg = sft.SFTConfig(lr=1e-2, warmup_steps=1, max_epochs=100, max_steps=7,
                        time_budget_s=600, tokens_per_batch=96, buckets=(16,), eval_every=1000)
    hist = sft.train(model, _rows(8), [], cfg, pad_id=0, log=lambda *a: None)
    assert hist["step"][-1] == 7 and hist["stopped_by"] == "steps"
    guard = dataclasses.replace(cfg, time_budget_s=0.0)    # a machine far too slow
    hist = sft.train(qwen2.init_model(_small(), seed=0), _rows(8), [], guard, pad_id=0,
                     log=lambda *a: None)
    assert hist["step"][-1] == 1 and hist["stopped_by"] == "time guard"


def test_the_same_build_makes_the_same_policy_however_slow_the_clock(monkeypatch):
    """With max_steps set, the clock (compile times, a slow machine) never moves the
    learning rate: a run whose clock races (each reading 40 s later, still inside the time
    guard) ends with the very same parameters."""
    cfg = sft.SFTConfig(lr=1e-2, warmup_steps=2, max_epochs=100, max_steps=6,
                        time_budget_s=1000, tokens_per_batch=96, buckets=(16,), eval_every=1000)

    def params_after(clock):
        if clock is not None:
            monkeypatch.setattr(sft.time, "time", clock)
        model = qwen2.init_model(_small(), seed=0)
        hist = sft.train(model, _rows(8), [], cfg, pad_id=0, log=lambda *a: None)
        monkeypatch.undo()
        assert hist["step"][-1] == 6 and hist["stopped_by"] == "steps"
        return hist, jax.tree.leaves(nnx.state(model, nnx.Param))

    h1, p1 = params_after(None)
    ticks = iter(range(0, 10 ** 6, 40))
    h2, p2 = params_after(lambda: float(next(ticks)))
    assert h2["seconds"][-1] > 0.2 * cfg.time_budget_s        # the racing clock did race
    assert h1["train_loss"] == h2["train_loss"]
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
