"""PPO in pure JAX: no files, no processes, no flags (README.md maps the options to verl's).

    advantages.py   token rewards, GAE over [B, T] rewards and values, whitening
    group_advantages.py  critic-free GRPO / RLOO / max@k over each prompt's samples
    losses.py       dual-clip PPO with duration weights, value, entropy, token reductions
    kl.py           k1/k2/k3 KL estimators (verl's clamps), the adaptive KL controller
    learner.py      the config, the train state and the jitted, sharded learner
    ppo_update.py   the update step (state, batch) -> (state, metrics), non-finite steps skipped
"""
