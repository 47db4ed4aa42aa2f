"""Train an MLE agent with asynchronous PPO.

    python experiments/run.py --flagfile=experiments/tabular.flags [--workdir=DIR] [--resume]

Writes DIR/metrics.jsonl, TensorBoard events (DIR/tb), orbax checkpoints (DIR/checkpoints),
the final policy as an HF directory (DIR/policy), a reward curve and a summary.

Exit status: 0 done; 2 bad input (a flag, a task, a policy or checkpoint that cannot be
used: one line says which and what to do); 3 training diverged (checkpointed); 4 no space
left on the disk (one line names the path and its free space; the last whole checkpoint is
kept, and --resume continues from it once there is room).
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
    from mle_rl.runtime import distributed
    distributed.initialize(cfg)
    from mle_rl.io import disk
    from mle_rl.io.checkpoint import CheckpointError
    from mle_rl.models.hf import CheckpointError as ModelCheckpointError
    from mle_rl.agent.trainer import Trainer
    from mle_rl.agent.update_guard import TrainingDiverged
    try:
        trainer = Trainer(cfg)
        summary = trainer.run()
    except (config.ConfigError, CheckpointError, ModelCheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:     # checkpointed and finished; the policy is the last good one
        print(f"error: {e}", file=sys.stderr)
        return 3
    except OSError as e:              # a full disk: one line, the last whole checkpoint kept
        if not disk.is_disk_full(e):
            raise
        if not isinstance(e, disk.DiskFullError):
            e = disk.disk_full(cfg.workdir, "the run's files")
        print(f"error: {e}", file=sys.stderr)
        return 4
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
