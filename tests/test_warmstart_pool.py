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
    pool = ap.all_combos("text", "multiclass")
    naive = pool[:8]                                      # the pool's own order
    assert len(ap.families(naive)) <= 2
    assert len(ap.families(ap.choose_combos("text", "multiclass", 8))) == 8


def test_incompatible_axes_are_rejected():
    assert not ap.all_combos("tabular", "binary")         # tables: generic.py's decisions
    for c in ap.all_combos("image", "regression"):
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
    combo = ap.all_combos("text", "binary")[0]
    with pytest.raises(ValueError, match="No program templates"):
        programs.render("no-such-task", combo)


def _blocks(code: str) -> list[str]:
    return [b for b in code.split("\n\n") if b.strip()]


def _imported(tree) -> set:
    return {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}


def _called_classes(tree) -> set:
    """Capitalized names called in `tree` (estimators, transformers, CV splitters), except
    those the block binds itself (`Model = ... if kind == "regress" else ...`)."""
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)}
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id[:1].isupper()} - bound


@pytest.mark.parametrize("task_id", sorted(programs.TASK_INFO))
def test_each_block_imports_what_it_calls(task_id):
    """Dependencies stay local: every class a blank-line-separated block calls is imported
    in that same block, and nothing a block imports goes unused there. (This is what lets
    the tokenizer make a block one token and the policy compose programs block by block.)"""
    info = programs.TASK_INFO[task_id]
    for combo in ap.all_combos(info.modality, info.kind):
        _, code = programs.render(task_id, combo)
        for block in _blocks(code):
            try:
                tree = ast.parse(block)
            except SyntaxError:          # a block of the span skeleton's helper functions
                continue                 # spans a blank line; covered by the whole program
            called, imported = _called_classes(tree), _imported(tree)
            assert called <= imported, (combo.key, block)
            names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
                n.value.id for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
            assert imported <= names | {"np", "pd", "re", "Image"}, (combo.key, block)


def test_blocks_of_two_programs_recombine():
    """Swapping the model block of one program into another (same task) gives a program
    whose every called class is still imported: the slots are interchangeable."""
    combos = ap.all_combos("text", "multiclass")
    _, a = programs.render("docstring-authorship", combos[0])
    for c in combos[1:40]:
        _, b = programs.render("docstring-authorship", c)
        ba, bb = _blocks(a), _blocks(b)
        mixed = "\n\n".join(ba[:2] + [bb[2]] + ba[3:])      # b's model block in a
        tree = ast.parse(mixed)
        assert _called_classes(tree) <= _imported(tree)


@pytest.mark.parametrize("task_id", ["digit-images", "docstring-authorship"])
def test_slow_combinations_are_skipped(task_id):
    info = programs.TASK_INFO[task_id]
    keep = ap.all_combos(info.modality, info.kind, lambda c: programs.skipped(info, c))
    every = ap.all_combos(info.modality, info.kind)
    assert 0 < len(keep) < len(every)
    assert not any(programs.skipped(info, c) for c in keep)
    assert len(ap.families(keep)) >= 7


@pytest.mark.parametrize("model,learning", [("linear", "holdout"), ("hist_gb", "early_stopping"),
                                            ("naive_bayes", "ensemble")])
def test_span_programs_use_the_generic_family_paragraph_and_run(model, learning):
    """The span skeleton's model is the task-generic family paragraph verbatim (its imports
    and `make` in one block, so they cannot disagree), and the program it makes runs on the
    built-in span task: a valid submission that finds the descriptions (word Jaccard > 0.9;
    every combination scored 0.94-0.97 when this was written)."""
    from mle_rl.env import action, tasks
    from mle_rl.warmstart.generic_code import FAMILIES
    combo = next(c for c in ap.all_combos("span", "binary")
                 if (c.model.name, c.learning.name, c.data.name) == (model, learning, "context"))
    plan, code = programs.render("docstring-param-span", combo)
    assert FAMILIES[model][1].rstrip("\n") in _blocks(code)
    assert f"Model: {FAMILIES[model][0]}." in plan
    res = action.run_code(tasks.get_task("docstring-param-span"), code, plan=plan,
                          instrumenter="ast")
    assert res.status == "ok", (res.message, res.stderr_tail[-1500:])
    assert res.score > 0.9, res.score
