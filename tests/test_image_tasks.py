"""Procedural picture tasks (`env/procedural/image_tasks.py`): valid user tasks in the layouts
image competitions use, deterministic, and read by the generic programs' image decision."""

import collections
import hashlib
import json
import pathlib

import pytest

from mle_rl.env import action, graders, user_tasks
from mle_rl.env.procedural import generate
from mle_rl.warmstart import generic

N = 10


def _digest(root: pathlib.Path) -> str:
    d = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        d.update(str(f.relative_to(root)).encode() + f.read_bytes())
    return d.hexdigest()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("img") / "tasks"
    return out, generate.generate(out, N, seed=3, image_share=1.0)


def test_picture_tasks_are_valid_varied_and_deterministic(made, tmp_path):
    out, ids = made
    assert len(ids) == N and all("-images-" in t for t in ids)
    layouts, kinds = collections.Counter(), collections.Counter()
    for tid in ids:
        task = user_tasks.load(out, tid)
        assert generic.has_images(task.public_dir), tid
        report = graders.grade_submission(task, task.public_dir / "sample_submission.csv")
        assert report["valid_submission"], (tid, report["message"])
        info = json.loads((out / tid / "generated.json").read_text())
        layouts[info["source"].split("/")[-1]] += 1
        kinds[info["kind"]] += 1
    assert len(layouts) >= 4 and len(kinds) >= 2, (layouts, kinds)
    again = generate.generate(tmp_path / "again", N, seed=3, image_share=1.0)
    assert again == ids and _digest(tmp_path / "again") == _digest(out)


def test_generic_programs_read_every_layout_and_mostly_beat_the_sample(made):
    from mle_rl.agent.evaluation import sample_submission_score
    out, ids = made
    better = 0
    for k, tid in enumerate(ids):
        task = user_tasks.load(out, tid)
        c = generic.Choice(task.metric, ("hist_gb", "random_forest")[k % 2], 3, 3,
                           "median_scale", "holdout", image=("hog", "color")[k % 2])
        plan, code = generic.render(c)
        res = action.run_code(task, code, plan=plan, instrumenter="ast")
        assert res.status == "ok", (tid, res.message, res.stderr_tail[-1500:])
        assert "image features:" in res.stdout_tail, (tid, res.stdout_tail[-600:])
        base = sample_submission_score(task)
        better += (res.score < base) if task.is_lower_better else (res.score > base)
    assert better >= N // 2, better


def test_no_picture_tasks_unless_asked(tmp_path):
    ids = generate.generate(tmp_path / "t", 4, seed=3, cache=tmp_path / "cache")
    assert not any("-images-" in t for t in ids)
    mixed = generate.generate(tmp_path / "m", 12, seed=4, cache=tmp_path / "cache",
                              image_share=0.3)
    assert 1 <= sum("-images-" in t for t in mixed) <= 8
