"""Parity of our Qwen2 with transformers' PyTorch Qwen2, and HF checkpoints in and out."""

import json

import numpy as np
import pytest

from tests.hf_utils import hf_logits, make_hf_model, save_hf, tiny_hf_config, transformers

import jax.numpy as jnp

from mle_rl.models import hf, qwen2

CONFIGS = {
    "tied_mha": dict(tied=True, heads=4, kv_heads=4),
    "untied_gqa4": dict(tied=False, heads=8, kv_heads=2, hidden=64),
    "tied_gqa4_theta1e6": dict(tied=True, heads=4, kv_heads=1, theta=1e6),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def hf_pair(request, tmp_path_factory):
    cfg = tiny_hf_config(**CONFIGS[request.param])
    model = make_hf_model(cfg, seed=len(request.param))
    path = save_hf(model, tmp_path_factory.mktemp(request.param))
    return model, path


def test_logits_match_transformers(hf_pair):
    ref, path = hf_pair
    ours = hf.load(path, dtype=jnp.float32)
    tokens = np.random.default_rng(0).integers(0, ref.config.vocab_size, (3, 11)).astype(np.int32)
    got = np.asarray(ours(jnp.asarray(tokens)))
    want = hf_logits(ref, tokens)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_logits_match_with_left_padding(hf_pair):
    ref, path = hf_pair
    ours = hf.load(path, dtype=jnp.float32)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, ref.config.vocab_size, (3, 9)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[0, :4] = 0   # left padding
    mask[2, :1] = 0
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    got = np.asarray(qwen2.forward(ours, jnp.asarray(tokens), attention_mask=jnp.asarray(mask)))
    want = hf_logits(ref, tokens, attention_mask=mask, position_ids=positions)
    valid = mask.astype(bool)
    np.testing.assert_allclose(got[valid], want[valid], atol=1e-4, rtol=0)


def test_save_then_transformers_load(hf_pair, tmp_path):
    ref, path = hf_pair
    ours = hf.load(path, dtype=jnp.float32)
    out = hf.save(ours, tmp_path / "exported")
    back = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokens = np.random.default_rng(2).integers(0, ref.config.vocab_size, (2, 7)).astype(np.int32)
    np.testing.assert_allclose(hf_logits(back, tokens), hf_logits(ref, tokens), atol=1e-5, rtol=0)
    # And our own loader reads its own output.
    again = hf.load(out)
    np.testing.assert_allclose(np.asarray(qwen2.forward(again, jnp.asarray(tokens))),
                               np.asarray(qwen2.forward(ours, jnp.asarray(tokens))), atol=1e-6,
                               rtol=0)


def test_sharded_checkpoint_with_index(tmp_path):
    ref = make_hf_model(tiny_hf_config(tied=False, heads=4, kv_heads=2, hidden=64), seed=3)
    path = save_hf(ref, tmp_path / "sharded", max_shard_size="40KB")
    assert (path / hf.INDEX_FILE).is_file()
    assert len(list(path.glob("*.safetensors"))) > 1
    ours = hf.load(path)
    tokens = np.arange(12, dtype=np.int32).reshape(2, 6)
    np.testing.assert_allclose(np.asarray(qwen2.forward(ours, jnp.asarray(tokens))),
                               hf_logits(ref, tokens),
                               atol=1e-4, rtol=0)
    # Our writer shards too, and transformers reads the index.
    out = hf.save(ours, tmp_path / "ours_sharded", max_shard_bytes=60_000)
    assert (out / hf.INDEX_FILE).is_file()
    back = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    np.testing.assert_allclose(hf_logits(back, tokens), hf_logits(ref, tokens), atol=1e-5, rtol=0)


def test_rope_theta_read_from_either_place(tmp_path):
    ref = make_hf_model(tiny_hf_config(theta=5e5), seed=4)
    path = save_hf(ref, tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    # transformers 5 writes rope_parameters.rope_theta; older files have a top-level key.
    assert hf.read_config(path).rope_theta == 5e5
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = 5e5
    (path / "config.json").write_text(json.dumps(cfg))
    assert hf.read_config(path).rope_theta == 5e5


# ------------------------------------------------------------------- bad input
@pytest.fixture
def good_ckpt(tmp_path):
    return save_hf(make_hf_model(tiny_hf_config(), seed=5), tmp_path / "good")


def test_other_architecture_is_a_clear_error(good_ckpt):
    cfg = json.loads((good_ckpt / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "llama", ["LlamaForCausalLM"]
    (good_ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hf.CheckpointError, match=r"config\.json.*LlamaForCausalLM.*not a Qwen2"):
        hf.load(good_ckpt)


def test_missing_shard_is_a_clear_error(tmp_path):
    path = save_hf(make_hf_model(tiny_hf_config(), seed=6), tmp_path / "m", max_shard_size="20KB")
    shard = sorted(path.glob("*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(hf.CheckpointError, match=shard.name + ".*missing"):
        hf.load(path)


def test_truncated_shard_is_a_clear_error(good_ckpt):
    f = good_ckpt / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(hf.CheckpointError, match="model.safetensors.*(truncated|unreadable)"):
        hf.load(good_ckpt)


def test_wrong_tensor_shape_is_a_clear_error(good_ckpt):
    cfg = json.loads((good_ckpt / "config.json").read_text())
    cfg["intermediate_size"] += 4
    (good_ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hf.CheckpointError, match=r"model\.layers\.0\.mlp\.\w+_proj\.weight.*shape"):
        hf.load(good_ckpt)


def test_missing_tensor_and_missing_dir(tmp_path, good_ckpt):
    with pytest.raises(hf.CheckpointError, match="not found"):
        hf.load(tmp_path / "nope")
    cfg = json.loads((good_ckpt / "config.json").read_text())
    cfg["num_hidden_layers"] = 3   # the file has only 2 layers
    (good_ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hf.CheckpointError, match=r"model\.layers\.2\..*missing"):
        hf.load(good_ckpt)


def test_long_sequences_use_blockwise_attention_and_still_match(hf_pair):
    """T >= 2 query blocks takes the blockwise causal path; it must match transformers too."""
    ref, path = hf_pair
    ours = hf.load(path, dtype=jnp.float32)
    t = 2 * qwen2.QUERY_BLOCK + 44
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, ref.config.vocab_size, (2, t)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[1, :50] = 0
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    got = np.asarray(qwen2.forward(ours, jnp.asarray(tokens), attention_mask=jnp.asarray(mask)))
    want = hf_logits(ref, tokens, attention_mask=mask, position_ids=positions)
    valid = mask.astype(bool)
    np.testing.assert_allclose(got[valid], want[valid], atol=1e-4, rtol=0)


def test_blockwise_attention_gradients_match_one_block(monkeypatch):
    """The blockwise causal path (T >= 2 query blocks) has the same gradients as attention
    over the whole sequence in one block."""
    import jax
    from flax import nnx
    from mle_rl.models import config as mcfg
    cfg = mcfg.ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=True)
    graphdef, params = nnx.split(qwen2.init_model(cfg, seed=0))
    t = 2 * qwen2.QUERY_BLOCK + 44
    rng = np.random.default_rng(4)
    tokens = jnp.asarray(rng.integers(0, 64, (2, t)), jnp.int32)
    mask = np.ones((2, t), np.int32)
    mask[1, :30] = 0
    mask = jnp.asarray(mask)

    def loss(p):
        logits = nnx.merge(graphdef, p)(tokens, attention_mask=mask)
        return jnp.sum(jax.nn.log_softmax(logits)[..., 3] * mask)

    blockwise = jax.jit(jax.value_and_grad(loss))(params)
    monkeypatch.setattr(qwen2, "QUERY_BLOCK", 10 * t)     # one block
    whole = jax.jit(jax.value_and_grad(loss))(params)
    np.testing.assert_allclose(blockwise[0], whole[0], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 blockwise[1], whole[1])


# ------------------------------------------------------------- the real 0.5B config
@pytest.mark.slow
def test_real_qwen2p5_0p5b_config_matches_transformers_and_round_trips(tmp_path):
    """At Qwen2.5-0.5B's real shapes (24 layers, width 896, GQA 14:2, 151,936-entry tied
    embedding; random weights): logits match transformers' Qwen2 to 1e-4 in float32 (with
    left padding), greedy KV-cache decoding picks transformers' tokens, and our export
    loads back into transformers with the same logits. ~2 GB per model copy; a few minutes."""
    import gc

    import jax
    import torch

    from mle_rl import sampling
    from mle_rl.models import config as mcfg

    cfg = mcfg.qwen2p5_0p5b()
    hf_cfg = transformers.Qwen2Config(**{**cfg.to_hf_dict(), "attn_implementation": "eager"})
    ref = make_hf_model(hf_cfg, seed=7)
    path = save_hf(ref, tmp_path / "hf")
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, cfg.vocab_size, (2, 24)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[1, :7] = 0                                           # left padding
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    want = hf_logits(ref, tokens, attention_mask=mask, position_ids=positions)
    with torch.no_grad():
        hf_greedy = ref.generate(torch.as_tensor(tokens[:1, :16], dtype=torch.long,
                                                 device=ref.device),
                                 max_new_tokens=8, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, 16:].cpu().numpy()
    del ref
    gc.collect()

    ours = hf.load(path, dtype=jnp.float32)
    assert ours.config == mcfg.ModelConfig.from_hf_dict(json.loads(
        (path / "config.json").read_text()))
    assert ours.config.vocab_size == 151936 and ours.config.num_layers == 24
    got = np.asarray(qwen2.forward(ours, jnp.asarray(tokens), attention_mask=jnp.asarray(mask)))
    valid = mask.astype(bool)
    assert got.shape == want.shape == (2, 24, 151936)
    np.testing.assert_allclose(got[valid], want[valid], atol=1e-4, rtol=0)

    out = sampling.generate(ours, [list(tokens[0, :16])], max_new_tokens=8,
                            rng=jax.random.key(0), temperature=0.0)
    np.testing.assert_array_equal(out.tokens[0], hf_greedy)

    exported = hf.save(ours, tmp_path / "ours")
    assert (exported / hf.SINGLE_FILE).stat().st_size < 4 << 30   # one file (tied head)
    del ours
    gc.collect()
    back = transformers.AutoModelForCausalLM.from_pretrained(
        str(exported), dtype=torch.float32, attn_implementation="eager").eval()
    np.testing.assert_allclose(hf_logits(back, tokens, attention_mask=mask,
                                         position_ids=positions)[valid], want[valid],
                               atol=1e-5, rtol=0)


def test_fingerprint_names_the_parameters(hf_pair, tmp_path):
    """Saved and loaded again: the same fingerprint. One value moved, or another dtype:
    another one."""
    import jax
    from flax import nnx
    _, path = hf_pair
    ours = hf.load(path, dtype=jnp.float32)
    fp = hf.fingerprint(ours)
    assert hf.fingerprint(hf.load(hf.save(ours, tmp_path / "again"), dtype=jnp.float32)) == fp
    assert hf.fingerprint(hf.load(path, dtype=jnp.bfloat16)) != fp
    params = nnx.state(ours, nnx.Param)
    first = jax.tree.leaves(params)[0]
    nnx.update(ours, jax.tree.map(lambda x: x.at[(0,) * x.ndim].add(1.0) if x is first else x,
                                  params))
    assert hf.fingerprint(ours) != fp
