"""Tiny random transformers Qwen2 models for parity tests (no download)."""

import os
import pathlib

import pytest

torch = pytest.importorskip("torch", reason="torch is the parity reference (pip install -e .[test])")
transformers = pytest.importorskip("transformers")

# Where the reference runs: the CPU by default; launch/accelerator_check.sh sets "cuda" so
# that transformers runs on the same GPU as JAX (float32 matmuls stay IEEE in torch).
DEVICE = os.environ.get("MLE_RL_PARITY_TORCH_DEVICE", "cpu")


def tiny_hf_config(tied=True, heads=4, kv_heads=4, vocab=97, hidden=32, layers=2, theta=10000.0):
    return transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden + 8,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=256, rope_theta=theta, tie_word_embeddings=tied,
        rms_norm_eps=1e-6, use_sliding_window=False, attn_implementation="eager")


def make_hf_model(cfg, seed=0):
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    # Random biases and norm weights too (HF initialises them to 0 / 1).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.to(DEVICE)


def save_hf(model, path: pathlib.Path, max_shard_size=None):
    kwargs = {"safe_serialization": True}
    if max_shard_size:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(str(path), **kwargs)
    return path


def hf_logits(model, tokens, attention_mask=None, position_ids=None):
    dev = next(model.parameters()).device
    as_t = lambda a: None if a is None else torch.as_tensor(a, device=dev)
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens, dtype=torch.long, device=dev),
                    attention_mask=as_t(attention_mask), position_ids=as_t(position_ids))
    return out.logits.float().cpu().numpy()
