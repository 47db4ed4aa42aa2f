"""Action pool: farthest-point selection covers the families; every template renders."""

import ast

import pytest

from mle_rl.warmstart import action_pool as ap
from mle_rl.warmstart import programs


@pytest.mark.parametrize("task_id", sorted(programs.TASK_INFO))
def test_farthest_point_covers_families(task_id):
    info = programs.TASK_INFO[task_id]
    pool = ap.all_combos(info.modality, info.kind)
    n_fam = len(ap.families(pool))
    picked = ap.choose_combos(info.modality, info.kind, n_fam, seed=3)
    assert len(picked) == n_fam
    assert ap.families(picked) == ap.families(pool)       # one of each family first
    assert len({c.key for c in picked}) == len(picked)


def test_farthest_point_spreads_more_than_first_n():
    pool = ap.all_combos("tabular", "binary")
    naive = pool[:8]                                      # the pool's own order
    assert len(ap.families(naive)) <= 2
    assert len(ap.families(ap.choose_combos("tabular", "binary", 8))) == 8


def test_incompatible_axes_are_rejected():
    for c in ap.all_combos("tabular", "regression"):
        assert c.model.name != "naive_bayes"
        if c.learning.name == "early_stopping":
            assert c.model.name in ap.EARLY_STOPPING_FAMILIES
    with pytest.raises(ValueError, match="No strategy combination"):
        ap.choose_combos("audio", "binary", 3)


@pytest.mark.parametrize("task_id", sorted(programs.TASK_INFO))
def test_every_combination_renders_valid_python(task_id):
    info = programs.TASK_INFO[task_id]
    for combo in ap.all_combos(info.modality, info.kind):
        plan, code = programs.render(task_id, combo)
        ast.parse(code)
        assert "submission.csv" in code and "input/train.csv" in code
        fam_words = {"knn": "neighbours", "hist_gb": "gradient boosting", "mlp": "MLP",
                     "svm": "support vector", "naive_bayes": "naive Bayes",
                     "random_forest": "random forest", "extra_trees": "randomized trees",
                     "linear": "linear model"}
        assert fam_words[combo.model.name] in plan       # the plan names the strategy


def test_unknown_task_has_a_clear_error():
    combo = ap.all_combos("tabular", "binary")[0]
    with pytest.raises(ValueError, match="No program templates"):
        programs.render("no-such-task", combo)
