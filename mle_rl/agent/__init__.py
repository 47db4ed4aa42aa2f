"""The agent: the training loop and the processes around it.

    trainer.py         Trainer.run(): act -> collect -> update -> log -> checkpoint
    components.py      the trainer's parts built from a RunConfig: tasks, policy (--policy_dir:
                       a checkpoint, `default` or `random`), instrumenter, prompt source,
                       actor pool, checkpointer, metrics logger
    prompt_sources.py  where prompts come from: solve / improve (from the per-task Archive),
                       expert states (ML-Agent's step-wise RL), a mix
    actors.py          ActorPool: submit / poll / close actions, run by subprocesses
    actor_handle.py    the pool's handle on one actor process (start, send, time, kill)
    actor_process.py   the inside of an actor: runs `env.action.run_action` per request
    buffer.py          replay buffer of finished rollouts (staleness bound), collate
    batch_metrics.py   one update's metrics row, reduced over processes
    evaluation.py      best-of-N evaluation (the paper's test protocol)

A prompt becomes a program in `Trainer._act` (sampling), a program a reward in the actors
(`env/action.py`), and a reward an update in `Trainer._update` (`rl/learner.py`).
"""
