"""Qwen2 in Flax NNX (pure JAX), and its files.

    qwen2.py        the causal LM; config.py: ModelConfig and presets; value_head.py
    hf.py           HF safetensors in and out, tokenizer loading
    sharding.py     the mesh and parameter shardings; linear.py, cpu_kernels.py (+ .cc):
                    the CPU decode kernels; decode_path.py: kernels or XLA, measured here
    draw.py         the sampler's token draw from a step's logits (inverse CDF, top-p, greedy)
"""
