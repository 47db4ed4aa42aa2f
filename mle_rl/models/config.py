"""`ModelConfig`: the Qwen2 / Qwen2.5 hyper-parameters, read from and written to HF `config.json`.

Named presets follow the published Qwen2.5 configs; `tiny()` is the CPU default (~13M
parameters) that the warm-start pipeline trains from nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

SUPPORTED_ARCHITECTURES = ("Qwen2ForCausalLM",)
SUPPORTED_MODEL_TYPES = ("qwen2",)


class ConfigError(ValueError):
    """A config.json this library cannot load; the message names the file and the field."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}.")

    @property
    def num_params(self) -> int:
        d, f, v = self.hidden_size, self.intermediate_size, self.vocab_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = d * q + q + 2 * (d * kv + kv) + q * d
        layer = attn + 3 * d * f + 2 * d
        head = 0 if self.tie_word_embeddings else v * d
        return v * d + self.num_layers * layer + d + head

    # ---------------------------------------------------------------- HF conversion
    @classmethod
    def from_hf_dict(cls, d: Mapping[str, Any], source: str = "config.json") -> "ModelConfig":
        archs = d.get("architectures") or []
        model_type = d.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES or (
                archs and not any(a in SUPPORTED_ARCHITECTURES for a in archs)):
            raise ConfigError(
                f"{source}: model_type={model_type!r}, architectures={archs} is not a Qwen2 "
                f"causal LM; mle_rl loads only {SUPPORTED_ARCHITECTURES[0]} checkpoints.")
        if d.get("use_sliding_window"):
            raise ConfigError(f"{source}: use_sliding_window=true is not supported.")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ConfigError(f"{source}: rope type {rope_type!r} is not supported (only default).")
        theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        try:
            heads = int(d["num_attention_heads"])
            hidden = int(d["hidden_size"])
            return cls(
                vocab_size=int(d["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(d["intermediate_size"]),
                num_layers=int(d["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(d.get("num_key_value_heads") or heads),
                head_dim=int(d.get("head_dim") or hidden // heads),
                rope_theta=float(theta),
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
                bos_token_id=d.get("bos_token_id"),
                eos_token_id=tuple(d["eos_token_id"]) if isinstance(d.get("eos_token_id"), list)
                else d.get("eos_token_id"),
                pad_token_id=d.get("pad_token_id"),
            )
        except KeyError as e:
            raise ConfigError(f"{source}: required field {e.args[0]!r} is missing.") from None

    def to_hf_dict(self) -> dict:
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        return {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "use_sliding_window": False,
            "attention_dropout": 0.0,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": "float32",
        }


# ------------------------------------------------------------------------- presets
def qwen2p5_0p5b() -> ModelConfig:
    return ModelConfig(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                       num_heads=14, num_kv_heads=2, head_dim=64, tie_word_embeddings=True,
                       bos_token_id=151643, eos_token_id=151645)


def qwen2p5_1p5b() -> ModelConfig:
    return ModelConfig(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                       num_heads=12, num_kv_heads=2, head_dim=128, tie_word_embeddings=True,
                       bos_token_id=151643, eos_token_id=151645)


def qwen2p5_3b() -> ModelConfig:
    return ModelConfig(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_layers=36,
                       num_heads=16, num_kv_heads=2, head_dim=128, tie_word_embeddings=True,
                       bos_token_id=151643, eos_token_id=151645)


def qwen2p5_7b() -> ModelConfig:
    return ModelConfig(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
                       num_heads=28, num_kv_heads=4, head_dim=128, tie_word_embeddings=False,
                       bos_token_id=151643, eos_token_id=151645)


def tiny(vocab_size: int = 8192) -> ModelConfig:
    """The CPU default: 6 layers, width 384, GQA 6:2, tied embeddings (~13M parameters)."""
    return ModelConfig(vocab_size=vocab_size, hidden_size=384, intermediate_size=1024,
                       num_layers=6, num_heads=6, num_kv_heads=2, head_dim=64,
                       rope_theta=10000.0, tie_word_embeddings=True, max_position_embeddings=4096)


def micro() -> ModelConfig:
    """A ~0.1M-parameter model for smoke tests of the plumbing (learns nothing useful)."""
    return ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=10000.0,
                       tie_word_embeddings=True, max_position_embeddings=8192)


PRESETS = {
    "qwen2p5_0p5b": qwen2p5_0p5b,
    "qwen2p5_1p5b": qwen2p5_1p5b,
    "qwen2p5_3b": qwen2p5_3b,
    "qwen2p5_7b": qwen2p5_7b,
    "tiny": tiny,
    "micro": micro,
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}.")
    return PRESETS[name]()
