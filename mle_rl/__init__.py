"""mle_rl: train small language-model agents with RL to do machine-learning engineering.

The data path, from a prompt to a program, a program to a reward, a reward to an update:

    agent/prompt_sources.py  a task -> a prompt: solve it, or improve an archived solution
    sampling.py              prompt tokens -> a response (plan + program) and its log-probs
    agent/actors.py          the response -> an actor process, which runs
    env/action.py              parse -> instrument -> sandbox -> grade -> reward, with Δt
    agent/buffer.py          finished actions -> rollouts -> a padded batch
    rl/learner.py            the batch -> one PPO update (GAE, duration-weighted losses)
    agent/trainer.py         the loop around them; checkpoints and metrics through io/

Layers, top to bottom. A package imports only from the layers below its own, never from a
neighbour in its layer (tests/test_layout.py checks this on every import, function-level
ones included):

    agent  __main__   the trainer loop, actors, buffer, prompts, best-of-N | the env CLI
    config            flags -> frozen configs, the edge (experiments/ defines the flags)
    warmstart  io     the warm start (ML-Agent) | checkpoints, metrics logs, policy loading
    sampling  rl      jitted decoding with a KV cache | PPO: pure JAX
    runtime           multi-host JAX (distributed.py), the tcmalloc re-exec (allocator.py)
    models  env       Qwen2 in Flax NNX: pure JAX | tasks, sandbox, grading, rewards: no JAX

`experiments/` (the absl apps) sits above them all.
"""

__version__ = "0.1.0"
