"""PPO in pure JAX: no files, no processes, no flags.

    advantages.py   GAE over [B, T] rewards and values
    losses.py       clipped PPO with duration weights, value, KL, entropy
    learner.py      the jitted, sharded update step: (state, batch) -> (state, metrics)
"""
