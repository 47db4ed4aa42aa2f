"""`experiments/kl_share.py`: the summed k1 of sampled responses against a reference, checked
against log-softmax of uncached forward passes."""

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

from mle_rl.models import config as mcfg
from mle_rl.models import qwen2

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import kl_share  # noqa: E402

CFG = mcfg.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0,
                       tie_word_embeddings=False)
PROMPT = [1, 2, 3, 4, 5]


def _logprobs(model, prompt, response):
    tokens = jnp.asarray([list(prompt) + list(response)], jnp.int32)
    lp = jax.nn.log_softmax(qwen2.forward(model, tokens)[0].astype(jnp.float32), axis=-1)
    pos = np.arange(len(prompt) - 1, len(prompt) - 1 + len(response))
    return np.asarray(lp)[pos, response]


def test_summed_k1_is_log_pi_minus_log_ref_over_each_response():
    pol, ref = qwen2.init_model(CFG, seed=0), qwen2.init_model(CFG, seed=1)
    sums, responses = kl_share.summed_k1(pol, ref, PROMPT, n=5, seed=0, max_new_tokens=12,
                                         batch=4)
    assert len(sums) == len(responses) == 5 and all(len(r) == 12 for r in responses)
    for s, r in zip(sums, responses):
        direct = np.sum(_logprobs(pol, PROMPT, r) - _logprobs(ref, PROMPT, r))
        np.testing.assert_allclose(s, direct, atol=2e-3)
    assert len({tuple(r) for r in responses}) > 1          # different samples, not one repeated
    assert np.abs(sums).max() > 0.1                        # two different models do differ
    same, _ = kl_share.summed_k1(pol, pol, PROMPT, n=3, seed=1, max_new_tokens=12)
    np.testing.assert_allclose(same, 0.0, atol=2e-3)       # a policy against itself: no KL


def test_spread_sets_the_penalty_beside_the_scores(tmp_path):
    sums, lens = np.array([1.0, 3.0, 5.0]), np.array([10, 10, 20])
    out = kl_share.spread(sums, lens, [0.80, 0.82, 0.84], kl_coef=0.02)
    assert out["k1_per_token"] == 9.0 / 40 and out["sum_k1_std"] == 2.0
    assert abs(out["penalty_std"] - 0.04) < 1e-12 and abs(out["valid_score_std"] - 0.02) < 1e-12
    assert abs(out["penalty_std_over_score_std"] - 2.0) < 1e-9
    ev = tmp_path / "e.json"
    ev.write_text(json.dumps({"t": {"scores": [0.8, None, 0.7, 0.9],
                                    "modes": ["solve", "solve", "improve", "solve"]}}))
    assert kl_share.valid_solve_scores(ev, "t") == [0.8, 0.9]
