"""Train an MLE agent with asynchronous PPO.

    python experiments/run.py --flagfile=experiments/tabular.flags [--workdir=DIR] [--resume]

Writes DIR/metrics.jsonl, TensorBoard events (DIR/tb), orbax checkpoints (DIR/checkpoints),
the final policy as an HF directory (DIR/policy), a reward curve and a summary.

Exit status: 0 done; 2 bad input (a flag, a task, a policy or checkpoint that cannot be
used: one line says which and what to do); 3 training diverged (checkpointed); 4 no space
left on the disk (one line names the path and its free space; the last whole checkpoint is
kept, and --resume continues from it once there is room); 5 another process of a
multi-process run was lost (one line names it; --resume of all continues from the last
checkpoint all of them finished).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from mle_rl import config  # noqa: E402

config.define_flags()
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        cfg = config.from_flags(FLAGS)
        config.require_sandbox(FLAGS.sandbox)  # no isolation: refuse before anything runs
    except config.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from mle_rl.runtime import compile_cache
    compile_cache.enable()    # compiled executables reused across processes
    from mle_rl.runtime import distributed, peers
    if cfg.num_processes > 1:     # a lost peer's abort said in one line (runtime/stderr_guard)
        from mle_rl.runtime import stderr_guard
        stderr_guard.install(cfg.process_id, cfg.num_processes,
                             os.path.join(cfg.workdir, "checkpoints"))
    distributed.initialize(cfg)
    watch = peers.start(cfg.process_id, cfg.num_processes,
                        os.path.join(cfg.workdir, "checkpoints"), timeout=cfg.peer_timeout_s)
    from mle_rl.io import disk
    from mle_rl.io.checkpoint import CheckpointError
    from mle_rl.models.hf import CheckpointError as ModelCheckpointError
    from mle_rl.agent.trainer import Trainer
    from mle_rl.agent.update_guard import TrainingDiverged
    try:
        trainer = Trainer(cfg)
        summary = trainer.run()
    except Exception as e:  # noqa: BLE001 - each kind below is one line and its exit status
        if watch is not None and (watch.lost or peers.is_peer_failure(e)):
            watch.exit_lost(e)            # a lost process: one line, exit 5, no shutdown wait
        if isinstance(e, (config.ConfigError, CheckpointError, ModelCheckpointError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        if isinstance(e, TrainingDiverged):   # checkpointed; the policy is the last good one
            print(f"error: {e}", file=sys.stderr)
            return 3
        if isinstance(e, OSError) and disk.is_disk_full(e):   # the last whole checkpoint kept
            if not isinstance(e, disk.DiskFullError):
                e = disk.disk_full(cfg.workdir, "the run's files")
            print(f"error: {e}", file=sys.stderr)
            return 4
        raise
    finally:
        if watch is not None:
            watch.finished()              # the collectives are over: no more judging
    if "process" in summary:          # a process other than 0 of a multi-host run
        print(f"done: process {summary['process']}: {summary['updates']} updates")
    else:
        print(f"done: {summary['updates']} updates in {summary['wall_s']} s; "
              f"best {summary['best']}")
    return 0


if __name__ == "__main__":
    from mle_rl.runtime import allocator
    allocator.reexec_with_tcmalloc()  # XLA:CPU temporaries without page faults
    app.run(main)
