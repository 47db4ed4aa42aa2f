"""The step-wise RL prompt source: samples valid states from the expert states pool."""

import json
import random

import numpy as np
import pytest

from mle_rl.env import prompts
from mle_rl.warmstart import states


def _pool(tmp_path):
    hist = {"plan": "I will use k-nearest neighbours.", "code": "import pandas as pd\nx = 1\n",
            "output": "validation AUC: 0.97\nwrote (171, 2)", "score": 0.97, "status": "ok"}
    rows = [{"task_id": "breast-cancer-diagnosis", "step": 0, "history": []},
            {"task_id": "breast-cancer-diagnosis", "step": 1, "history": [hist]},
            {"task_id": "diabetes-progression", "step": 0, "history": []}]
    (tmp_path / "states.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_samples_solve_and_improve_states(tmp_path):
    src = states.ExpertStatesSource(_pool(tmp_path), task_ids=["breast-cancer-diagnosis"])
    assert len(src) == 2
    kinds = set()
    for rng in (random.Random(0), np.random.default_rng(0)):
        for _ in range(12):
            task_id, text, meta = src.sample(rng)
            assert task_id == "breast-cancer-diagnosis"
            assert prompts.ROLE in text and "Breast Cancer" in text
            kinds.add(meta["kind"])
            if meta["kind"] == "improve":
                assert "# Previous solution" in text and "validation AUC: 0.97" in text
                assert meta["prev_score"] == 0.97 and meta["step"] == 1
    assert kinds == {"solve", "improve"}


def test_mixed_source_and_errors(tmp_path):
    class Own:
        def sample(self, rng):
            return "penguin-island", "own prompt", {"source": "own"}

    src = states.ExpertStatesSource(_pool(tmp_path))
    mixed = states.MixedSource([(src, 0.5), (Own(), 0.5)])
    got = {mixed.sample(random.Random(i))[2]["source"] for i in range(30)}
    assert got == {"expert_states", "own"}
    with pytest.raises(FileNotFoundError, match="No states pool"):
        states.ExpertStatesSource(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no state"):
        states.ExpertStatesSource(_pool(tmp_path), task_ids=["digit-images"])
