"""mle_rl: reinforcement learning for machine-learning-engineering agents, in JAX/Flax."""

from setuptools import find_packages, setup

setup(
    name="mle_rl",
    version="0.1.0",
    description="RL for MLE agents (duration-aware PPO, instrumentation, self-improvement) "
    "and ML-Agent (exploration-enriched fine-tuning, step-wise RL) in JAX/Flax NNX.",
    packages=find_packages(include=["mle_rl", "mle_rl.*"]),
    # C++ source of the CPU decode kernel, compiled on first use (models/cpu_kernels.py).
    package_data={"mle_rl.models": ["*.cc"]},
    python_requires=">=3.10",
    install_requires=[
        "jax",
        "flax>=0.10",
        "optax",
        "orbax-checkpoint",
        "chex",
        "absl-py",
        "transformers",
        "safetensors",
        "tokenizers",
        "numpy",
        "pandas",
        "scikit-learn",
        "matplotlib",
        "tensorboardX",
        "pillow",
        "palmerpenguins",
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist", "psutil", "torch==2.13.0"],
        "cuda": ["jax[cuda12]"],
        "tpu": ["jax[tpu]"],
    },
    entry_points={"console_scripts": ["mle_rl=mle_rl.__main__:main"]},
)
