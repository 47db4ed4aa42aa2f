"""mle_rl: train small language-model agents with RL to do machine-learning engineering."""

__version__ = "0.1.0"
