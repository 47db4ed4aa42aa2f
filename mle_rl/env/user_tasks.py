"""A user's own task: the MLE-bench layout plus a `task.json` (`--task_dir=DIR`).

    DIR/<task-id>/task.json                 {"metric": "auc", "id_column": "id",
                                             "target_columns": ["target"]}
    DIR/<task-id>/prepared/public/          description.md, sample_submission.csv and the
                                            data in any form: train.csv / test.csv, JSON,
                                            folders of images, archives
    DIR/<task-id>/prepared/private/answers.csv   the id column + the target columns

task.json may also give "lower_is_better" (it must agree with the metric), "timeout_s",
"memory_mb" (limits of one program) and "modality" (tabular | text | image). For
multiclass log loss the answers are one-hot, in columns named as in the sample submission.
`load(DIR, id)` checks everything a grader relies on (a known metric, the columns in each
file, the answers holding exactly the test ids: those of test.csv, or without one, as in
image competitions, those of the sample submission) and raises `TaskSpecError` with one
line naming the file and the fix; it reads only headers and id columns.
"""

from __future__ import annotations

import csv
import json
import pathlib

from mle_rl.env.graders import TableGrader
from mle_rl.env.metrics import METRICS
from mle_rl.env.types import Task

SPEC_FILE = "task.json"
KEYS = {"metric", "id_column", "target_columns", "lower_is_better", "timeout_s", "memory_mb",
        "modality"}
MODALITIES = ("tabular", "text", "image")
PUBLIC_FILES = ("description.md", "sample_submission.csv")
DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_MB = 600.0, 4096


class TaskSpecError(ValueError):
    """A user task that cannot be graded as described; the message is one line."""


def _header(path: pathlib.Path) -> list:
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return next(csv.reader(f), [])


def _column(path: pathlib.Path, name: str) -> list:
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.reader(f)
        k = next(rows).index(name)
        return [r[k] if k < len(r) else "" for r in rows]


def _read_spec(root: pathlib.Path) -> dict:
    path = root / SPEC_FILE
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskSpecError(f"{path} is missing; write {{\"metric\": ..., \"id_column\": ..., "
                            "\"target_columns\": [...]}} there.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TaskSpecError(f"{path} is not valid JSON ({e}).") from None
    if not isinstance(spec, dict):
        raise TaskSpecError(f"{path} must hold a JSON object, not {type(spec).__name__}.")
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise TaskSpecError(f"{path} has unknown key(s) {unknown}; known: {sorted(KEYS)}.")
    for key in ("metric", "id_column", "target_columns"):
        if key not in spec:
            raise TaskSpecError(f"{path} lacks \"{key}\".")
    if spec["metric"] not in METRICS:
        raise TaskSpecError(f"{path}: unknown metric {spec['metric']!r}; use one of "
                            f"{', '.join(sorted(METRICS))}.")
    if not isinstance(spec["id_column"], str) or not spec["id_column"]:
        raise TaskSpecError(f"{path}: \"id_column\" must be a column name.")
    targets = spec["target_columns"]
    if (not isinstance(targets, list) or not targets
            or not all(isinstance(t, str) and t for t in targets)):
        raise TaskSpecError(f"{path}: \"target_columns\" must be a non-empty list of column "
                            "names.")
    direction = METRICS[spec["metric"]]
    if "lower_is_better" in spec and spec["lower_is_better"] is not direction:
        raise TaskSpecError(f"{path}: metric {spec['metric']} is "
                            f"{'lower' if direction else 'higher'}-is-better, but "
                            f"\"lower_is_better\" says {spec['lower_is_better']}; remove it.")
    for key in ("timeout_s", "memory_mb"):
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value <= 0):
            raise TaskSpecError(f"{path}: \"{key}\" must be a positive number, got {value!r}.")
    if spec.get("modality", "tabular") not in MODALITIES:
        raise TaskSpecError(f"{path}: \"modality\" must be one of {', '.join(MODALITIES)}.")
    return spec


def _check_files(root: pathlib.Path, spec: dict) -> None:
    public, private = root / "prepared" / "public", root / "prepared" / "private"
    for name in PUBLIC_FILES:
        if not (public / name).is_file():
            raise TaskSpecError(f"{public / name} is missing; a task needs "
                                f"{', '.join(PUBLIC_FILES)} in prepared/public/ (and its "
                                f"data: train.csv / test.csv, or any files).")
    answers = private / "answers.csv"
    if not answers.is_file():
        raise TaskSpecError(f"{answers} is missing; write the test ids and their targets there.")
    id_col, targets = spec["id_column"], spec["target_columns"]
    ids_file = public / "test.csv"
    if not ids_file.is_file():          # an image competition: the sample names the test
        ids_file = public / "sample_submission.csv"
    needs = {ids_file: [id_col], public / "sample_submission.csv": [id_col, *targets],
             answers: [id_col, *targets]}
    for path, cols in needs.items():
        header = _header(path)
        missing = [c for c in cols if c not in header]
        if missing:
            raise TaskSpecError(f"{path} lacks column(s) {missing} named in task.json "
                                f"(its header: {','.join(header[:10])}).")
    test_ids = _column(ids_file, id_col)
    answer_ids = _column(answers, id_col)
    if len(set(test_ids)) != len(test_ids):
        raise TaskSpecError(f"{ids_file} repeats ids in column '{id_col}'.")
    if sorted(test_ids) != sorted(answer_ids):
        absent = sorted(set(test_ids) - set(answer_ids))
        extra = sorted(set(answer_ids) - set(test_ids))
        raise TaskSpecError(f"{answers} does not hold exactly the ids of {ids_file.name}: "
                            f"{len(absent)} test id(s) without an answer (e.g. {absent[:3]}), "
                            f"{len(extra)} answer id(s) not in {ids_file.name} (e.g. "
                            f"{extra[:3]}).")


def task_ids(task_dir) -> list:
    """Sorted ids of the task dirs (with a task.json) under `task_dir`; [] for None."""
    if task_dir is None:
        return []
    base = pathlib.Path(task_dir).expanduser()
    if not base.is_dir():
        raise TaskSpecError(f"--task_dir {base} is not a directory.")
    return sorted(p.parent.name for p in base.glob(f"*/{SPEC_FILE}"))


def load(task_dir, task_id: str) -> Task:
    """The Task for `task_dir/<task_id>`, after checking it; raises TaskSpecError."""
    root = pathlib.Path(task_dir).expanduser() / task_id
    spec = _read_spec(root)
    _check_files(root, spec)
    prepared = root / "prepared"
    return Task(id=task_id, root=prepared, metric=spec["metric"],
                is_lower_better=METRICS[spec["metric"]],
                grader=TableGrader(spec["metric"], spec["id_column"],
                                   tuple(spec["target_columns"])),
                modality=spec.get("modality", "tabular"), answers_file="answers.csv",
                timeout_s=float(spec.get("timeout_s", DEFAULT_TIMEOUT_S)),
                memory_mb=int(spec.get("memory_mb", DEFAULT_MEMORY_MB)),
                source="user", description_path=prepared / "public" / "description.md")
