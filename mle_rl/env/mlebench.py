"""Registry of real MLE-bench competitions: id -> metric, direction, answers file, grader.

Data comes from `mlebench prepare`, laid out as `<mlebench_dir>/<id>/prepared/{public,private}`.
Column conventions follow each competition's answers file as mlebench prepares it (answers
in `private/`, e.g. `test.csv` or `answers.csv`). Covers the RL-for-MLE paper's tasks and the
MLE-bench tasks of ML-Agent; feedback-prize-english-language-learning (an MLAgentBench task)
follows Kaggle's format if you lay it out the same way yourself.

Each grader checks a submission as that competition's MLE-bench grade.py does (commit
783b15a): which extra columns it refuses (`header`), how close to 1 a row of probabilities
must sum (`prob_sum`), and how it reads the CSV (`mlebench_csv`). It is never more lenient;
where it is stricter, or scores by id / name where MLE-bench goes by position, GRADING.md
(next to this file) lists why. tests/test_mlebench_grading.py checks every competition
against verdicts and scores from MLE-bench's own grade.py.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Optional

from mle_rl.env.graders import TableGrader
from mle_rl.env.metrics import METRICS
from mle_rl.env.types import Task


@dataclasses.dataclass(frozen=True)
class MLEBenchSpec:
    """What we know of one competition. answers_files: candidates inside private/, first found wins."""

    id: str
    grader: TableGrader
    modality: str
    answers_files: tuple = ("test.csv",)
    reward_scale: float = 1.0
    timeout_s: float = 3600.0
    memory_mb: int = 16384

    @property
    def metric(self) -> str:
        return self.grader.metric

    @property
    def is_lower_better(self) -> bool:
        return METRICS[self.grader.metric]


def _spec(id, metric, id_col, targets, modality, answers=("test.csv",), scale=1.0, **rules):
    """rules: TableGrader's header / prob_sum, as that competition's grade.py checks."""
    return MLEBenchSpec(id=id, grader=TableGrader(metric, id_col, targets, mlebench_csv=True,
                                                  **rules),
                        modality=modality, answers_files=answers, reward_scale=scale)


SPECS: dict = {s.id: s for s in (
    # The RL-for-MLE paper's tasks.
    _spec("detecting-insults-in-social-commentary", "auc", "Comment", ("Insult",), "text",
          scale=10.0),
    _spec("random-acts-of-pizza", "auc", "request_id", ("requester_received_pizza",), "text",
          scale=10.0),
    _spec("tweet-sentiment-extraction", "word_jaccard", "textID", ("selected_text",), "text",
          scale=5.0),
    _spec("tabular-playground-series-may-2022", "auc", "id", ("target",), "tabular", scale=10.0),
    _spec("leaf-classification", "multiclass_log_loss", "id", None, "image", scale=2.0,
          header="exact"),
    _spec("nomad2018-predict-transparent-conductors", "rmsle_column_mean", "id",
          ("formation_energy_ev_natom", "bandgap_energy_ev"), "tabular", scale=10.0),
    _spec("spooky-author-identification", "multiclass_log_loss", "id", ("EAP", "HPL", "MWS"),
          "text", scale=2.0, header="exact_id_first"),
    _spec("lmsys-chatbot-arena", "multiclass_log_loss", "id",
          ("winner_model_a", "winner_model_b", "winner_tie"), "text", ("answers.csv",), 2.0,
          prob_sum="round6"),
    # ML-Agent's MLE-bench tasks (training and held-out).
    _spec("aerial-cactus-identification", "auc", "id", ("has_cactus",), "image", scale=10.0),
    _spec("dogs-vs-cats-redux-kernels-edition", "binary_log_loss", "id", ("label",), "image",
          ("answers.csv",), 2.0),
    _spec("plant-pathology-2020-fgvc7", "mean_column_auc", "image_id",
          ("healthy", "multiple_diseases", "rust", "scab"), "image", scale=10.0, header="exact"),
    _spec("spaceship-titanic", "accuracy", "PassengerId", ("Transported",), "tabular",
          scale=10.0),
    _spec("denoising-dirty-documents", "rmse", "id", ("value",), "image", ("answers.csv",),
          10.0),
    _spec("statoil-iceberg-classifier-challenge", "binary_log_loss", "id", ("is_iceberg",),
          "image", scale=2.0),
    _spec("whale-categorization-playground", "map_at_5", "Image", ("Id",), "image", scale=5.0,
          header="exact"),
    _spec("learning-agency-lab-automated-essay-scoring-2", "quadratic_weighted_kappa",
          "essay_id", ("score",), "text", ("answers.csv",), 5.0),
    _spec("jigsaw-toxic-comment-classification-challenge", "mean_column_auc", "id",
          ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"), "text",
          scale=10.0, header="exact"),
    _spec("us-patent-phrase-to-phrase-matching", "pearson", "id", ("score",), "text",
          scale=5.0),
    _spec("tabular-playground-series-dec-2021", "accuracy", "Id", ("Cover_Type",), "tabular",
          scale=10.0),
    _spec("feedback-prize-english-language-learning", "mcrmse", "text_id",
          ("cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"), "text",
          ("answers.csv", "test.csv"), 2.0),
)}


def prepared_root(mlebench_dir, task_id: str) -> Optional[pathlib.Path]:
    """`<mlebench_dir>/<id>/prepared` if it has public/ and private/, else None."""
    if mlebench_dir is None:
        return None
    root = pathlib.Path(mlebench_dir).expanduser() / task_id / "prepared"
    if (root / "public").is_dir() and (root / "private").is_dir():
        return root
    return None


def found_ids(mlebench_dir) -> list[str]:
    """Sorted ids of the recognised competitions prepared under `mlebench_dir`."""
    if mlebench_dir is None or not pathlib.Path(mlebench_dir).expanduser().is_dir():
        return []
    return sorted(i for i in SPECS if prepared_root(mlebench_dir, i) is not None)


def make_task(mlebench_dir, task_id: str) -> Task:
    """The Task for a prepared competition; raises FileNotFoundError naming what is missing."""
    spec = SPECS[task_id]
    root = prepared_root(mlebench_dir, task_id)
    if root is None:
        raise FileNotFoundError(
            f"MLE-bench task '{task_id}' is not prepared under {mlebench_dir}: expected "
            f"{pathlib.Path(mlebench_dir) / task_id / 'prepared'}/public and /private; run "
            f"`mlebench prepare -c {task_id}` with that data dir.")
    answers = next((a for a in spec.answers_files if (root / "private" / a).is_file()), None)
    if answers is None:
        raise FileNotFoundError(
            f"MLE-bench task '{task_id}' has no answers file in {root / 'private'} "
            f"(looked for {', '.join(spec.answers_files)}); prepare it again.")
    desc = next((p for p in (root / "description.md", root.parent / "description.md",
                             root / "public" / "description.md") if p.is_file()), None)
    return Task(id=task_id, root=root, metric=spec.metric, is_lower_better=spec.is_lower_better,
                grader=spec.grader, modality=spec.modality, answers_file=answers,
                timeout_s=spec.timeout_s, memory_mb=spec.memory_mb,
                reward_scale=spec.reward_scale, source="mlebench", description_path=desc)
