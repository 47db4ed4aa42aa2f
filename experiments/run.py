"""Train an MLE agent with asynchronous PPO.

    python experiments/run.py --flagfile=experiments/tabular.flags [--workdir=DIR] [--resume]

Writes DIR/metrics.jsonl, TensorBoard events (DIR/tb), orbax checkpoints (DIR/checkpoints),
the final policy as an HF directory (DIR/policy), a reward curve and a summary.
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
