"""The Tunix side of `bench_tunix.py`; run by the Tunix venv's python, never by ours.

Loads the HF checkpoint that our side wrote (`mle_rl.models.hf.save`, float32) into Tunix
0.1.7's Qwen2 (`tunix.models.qwen2.params.create_model_from_safe_tensors`, float32) and
serves `tunix.generate.sampler.Sampler.__call__` through `peer_worker.serve`.

How the sampler is called, so that it produces exactly `new_tokens` tokens per row and
does the same work as ours:
* Prompts are token ids; Tunix takes strings, so a tokenizer of our own maps
  "12 7 901" <-> [12, 7, 901] (no BOS). Its pad id is the vocabulary size: an id the model
  never generates and no prompt contains (Tunix masks every buffer position holding the
  pad id out of attention, also generated ones).
* `eos_tokens=[-1]`: no token ever ends a row (Tunix would otherwise stop a row at the
  tokenizer's EOS id), so its `while_loop` runs all `max_generation_steps` steps.
* `max_prompt_length` = the prompt length (no left padding); cache size = prompt + new.
* Temperature 1: `top_p=1.0, top_k=None` (Tunix's "top_p" mode, which then draws
  `jax.random.categorical` over the whole vocabulary, no sort). Greedy: `temperature=0`,
  no `top_p` ("greedy" mode, argmax).
* `echo=False, return_logits=False`, no log-probs.

    <tunix venv>/bin/python benchmarks/tunix_side.py --ckpt DIR --prompt-len 32 --new-tokens 512
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import peer_worker  # noqa: E402


class IdTokenizer:
    """Token ids written as decimal numbers separated by spaces; the methods Tunix's
    `TokenizerAdapter` asks of a custom tokenizer."""

    def __init__(self, pad: int):
        self._pad = pad

    def encode(self, text: str, **_) -> list:
        return [int(t) for t in text.split()]

    def decode(self, ids, **_) -> str:
        return " ".join(str(int(t)) for t in ids)

    def bos_id(self):
        return None

    def eos_id(self):
        return -1

    def pad_id(self):
        return self._pad


def tunix_config(hf: dict, model_lib, jnp):
    """Tunix's Qwen2 `ModelConfig` from an HF config.json (as `hf.save` writes it)."""
    heads = hf["num_attention_heads"]
    return model_lib.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"], num_heads=heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        rope_theta=int(hf["rope_theta"]), norm_eps=hf["rms_norm_eps"],
        use_tied_embedding=bool(hf.get("tie_word_embeddings")),
        dtype=jnp.float32, param_dtype=jnp.float32)


def load(args):
    import flax
    import jax
    import jax.numpy as jnp
    import jaxlib
    import numpy as np
    import tunix
    from flax import nnx
    from tunix.generate import sampler as sampler_lib
    from tunix.models.qwen2 import model as model_lib
    from tunix.models.qwen2 import params as params_lib

    hf = json.loads((pathlib.Path(args.ckpt) / "config.json").read_text())
    cfg = tunix_config(hf, model_lib, jnp)
    model = params_lib.create_model_from_safe_tensors(args.ckpt, cfg, mesh=None,
                                                      dtype=jnp.float32)
    leaves = jax.tree.leaves(nnx.state(model))
    missing = sum(not isinstance(x, jax.Array) for x in leaves)
    if missing:
        raise RuntimeError(f"Tunix's loader left {missing} of {len(leaves)} parameters "
                           f"unloaded from {args.ckpt}.")
    cache = sampler_lib.CacheConfig(cache_size=args.prompt_len + args.new_tokens,
                                    num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads,
                                    head_dim=cfg.head_dim)
    sampler = sampler_lib.Sampler(model, IdTokenizer(pad=cfg.vocab_size), cache)

    def generate(prompts, new_tokens, temperature, seed):
        kwargs = dict(max_generation_steps=new_tokens, max_prompt_length=args.prompt_len,
                      echo=False, return_logits=False, eos_tokens=[-1],
                      temperature=temperature, seed=seed)
        if temperature > 0:
            kwargs.update(top_p=1.0, top_k=None)
        out = sampler([" ".join(map(str, p)) for p in prompts], **kwargs)
        return [np.asarray(t) for t in out.tokens]

    info = {"tunix": tunix.__version__, "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "flax": flax.__version__, "devices": str(jax.devices()),
            "python": sys.version.split()[0], "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            "allocator": "tcmalloc" if "tcmalloc" in os.environ.get("LD_PRELOAD", "") else
            "glibc malloc", "params": int(sum(x.size for x in leaves))}
    return generate, info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--prompt-len", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--cores", type=int, default=None)
    args = ap.parse_args(argv)
    peer_worker.pin_cores(args.cores)
    proto = peer_worker.protocol_stdout()
    try:
        compile_log = peer_worker.CompileLog()
        generate, info = load(args)
    except Exception as e:  # noqa: BLE001 - reported to the orchestrator
        peer_worker.fail_startup(proto, e)
        return 1
    peer_worker.serve(generate, info, proto, compile_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
