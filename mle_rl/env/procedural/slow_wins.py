"""duration-synth: a task on which the best model families are the slow ones, for the duration
weights ablation (the RL-for-MLE paper's Figure 2).

The rows come from tabular-synth's generator (`env/builtin/synth.make_frame`: pairwise
interactions, thresholds and the letters of a code string), 2,000 of them drawn with another
seed, so that one program takes seconds rather than tabular-synth's tens of seconds and an
RL run of 30 updates fits in about 15 minutes on 2 cores. The default policy's programs on
it (32 samples at temperature 1, 2 shared cores): linear models, naive Bayes and k-NN take
0.3-0.5 s and reach AUC 0.63-0.75 on average; gradient boosting (0.80, best 0.85) and the
MLP (0.82) take 2-7 s. The forests and the SVM are as slow and no better than the linear
model, so speed alone does not say which family is good. It is written as a user
task directory (`--task_dir` layout), like the held-out tasks:

    python -m mle_rl.env.procedural.slow_wins DIR     # writes DIR/duration-synth/
"""

from __future__ import annotations

import pathlib
import shutil
import sys

from mle_rl.env.builtin import synth
from mle_rl.env.procedural import generate

TASK_ID = "duration-synth"
N_ROWS = 2000
SEED = 2023


def write(out_dir) -> str:
    """Writes `out_dir/duration-synth/` (replacing it); returns the task id."""
    train, test, answers, sample = synth.split(synth.make_frame(N_ROWS, SEED), SEED)
    dest = pathlib.Path(out_dir) / TASK_ID
    shutil.rmtree(dest, ignore_errors=True)
    generate.write({"spec": {"metric": "auc", "id_column": "id", "target_columns": ["target"]},
                    "train": train, "test": test, "answers": answers, "sample": sample,
                    "description": synth.description(train, test, sample, SEED),
                    "kind": "ablation", "source": f"tabular-synth generator, {N_ROWS} rows, "
                                                  f"seed {SEED}"}, dest)
    return TASK_ID


if __name__ == "__main__":
    print(write(sys.argv[1] if len(sys.argv) > 1 else "."))
