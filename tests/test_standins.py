"""The MLE-bench stand-ins (`mle_rl/env/standins`): each of the 20 competitions is written in
the layout MLE-bench's prepare.py leaves (files, columns, archives, folders, id formats),
loads with `mlebench.make_task`, and grades with our grader: the answers as a submission
score best, the public sample submission is valid (us-patent's is not, as in MLE-bench),
a submission short of one row is refused. The layouts below are written out here, from
each competition's prepare.py (openai/mle-bench), not read from the package under test."""

import json
import re
import shutil
import zipfile

import numpy as np
import pandas as pd
import pytest

from mle_rl.env import graders, mlebench, standins
from mle_rl.env.standins import common

IDS = list(mlebench.SPECS)
CSV3 = {"train.csv", "test.csv", "sample_submission.csv"}
# Top-level entries of prepared/public ("name/" = a folder).
PUBLIC = {
    "detecting-insults-in-social-commentary": {"train.csv", "test.csv",
                                               "sample_submission_null.csv"},
    "random-acts-of-pizza": {"train.json", "test.json", "train.zip", "test.zip",
                             "sampleSubmission.csv"},
    "tweet-sentiment-extraction": CSV3,
    "tabular-playground-series-may-2022": CSV3,
    "leaf-classification": CSV3 | {"images/"},
    "nomad2018-predict-transparent-conductors": CSV3 | {"train/", "test/"},
    "spooky-author-identification": CSV3,
    "lmsys-chatbot-arena": CSV3,
    "aerial-cactus-identification": {"train.csv", "train.zip", "test.zip",
                                     "sample_submission.csv"},
    "dogs-vs-cats-redux-kernels-edition": {"train/", "test/", "train.zip", "test.zip",
                                           "sample_submission.csv"},
    "plant-pathology-2020-fgvc7": CSV3 | {"images/"},
    "spaceship-titanic": CSV3,
    "denoising-dirty-documents": {"train/", "train_cleaned/", "test/", "sampleSubmission.csv"},
    "statoil-iceberg-classifier-challenge": {"train.json.7z", "test.json.7z",
                                             "sample_submission.csv.7z"},
    "whale-categorization-playground": {"train/", "test/", "train.csv",
                                        "sample_submission.csv"},
    "learning-agency-lab-automated-essay-scoring-2": CSV3,
    "jigsaw-toxic-comment-classification-challenge": CSV3,
    "us-patent-phrase-to-phrase-matching": CSV3,
    "tabular-playground-series-dec-2021": CSV3,
    "feedback-prize-english-language-learning": CSV3,
}
PRIVATE = {i: {mlebench.SPECS[i].answers_files[0]} for i in IDS}
PRIVATE["statoil-iceberg-classifier-challenge"] |= {"sample_submission.csv"}

F = lambda p, k: [f"{p}{j}" for j in range(1, k + 1)]
MAY = ["id"] + [f"f_{j:02d}" for j in range(31)]
NOMAD = ["id", "spacegroup", "number_of_total_atoms", "percent_atom_al", "percent_atom_ga",
         "percent_atom_in", "lattice_vector_1_ang", "lattice_vector_2_ang",
         "lattice_vector_3_ang", "lattice_angle_alpha_degree", "lattice_angle_beta_degree",
         "lattice_angle_gamma_degree"]
NOMAD_Y = ["formation_energy_ev_natom", "bandgap_energy_ev"]
SPACE = ["PassengerId", "HomePlanet", "CryoSleep", "Cabin", "Destination", "Age", "VIP",
         "RoomService", "FoodCourt", "ShoppingMall", "Spa", "VRDeck", "Name"]
COVER = ["Id", "Elevation", "Aspect", "Slope", "Horizontal_Distance_To_Hydrology",
         "Vertical_Distance_To_Hydrology", "Horizontal_Distance_To_Roadways", "Hillshade_9am",
         "Hillshade_Noon", "Hillshade_3pm", "Horizontal_Distance_To_Fire_Points",
         *F("Wilderness_Area", 4), *F("Soil_Type", 40)]
LEAF = ["id", *F("margin", 64), *F("shape", 64), *F("texture", 64)]
LMSYS = ["id", "model_a", "model_b", "prompt", "response_a", "response_b",
         "winner_model_a", "winner_model_b", "winner_tie"]
JIG = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
PLANT = ["image_id", "healthy", "multiple_diseases", "rust", "scab"]
ELL = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]
# (competition, file under prepared/) -> its exact header; None: leaf's species columns.
HEADERS = {
    ("detecting-insults-in-social-commentary", "public/train.csv"): ["Insult", "Date", "Comment"],
    ("detecting-insults-in-social-commentary", "public/test.csv"): ["Date", "Comment"],
    ("detecting-insults-in-social-commentary", "public/sample_submission_null.csv"):
        ["Insult", "Date", "Comment"],
    ("detecting-insults-in-social-commentary", "private/test.csv"):
        ["Insult", "Date", "Comment", "Usage"],
    ("random-acts-of-pizza", "public/sampleSubmission.csv"):
        ["request_id", "requester_received_pizza"],
    ("random-acts-of-pizza", "private/test.csv"): ["request_id", "requester_received_pizza"],
    ("tweet-sentiment-extraction", "public/train.csv"):
        ["textID", "text", "selected_text", "sentiment"],
    ("tweet-sentiment-extraction", "public/test.csv"): ["textID", "text", "sentiment"],
    ("tweet-sentiment-extraction", "public/sample_submission.csv"): ["textID", "selected_text"],
    ("tweet-sentiment-extraction", "private/test.csv"):
        ["textID", "text", "selected_text", "sentiment"],
    ("tabular-playground-series-may-2022", "public/train.csv"): MAY + ["target"],
    ("tabular-playground-series-may-2022", "public/test.csv"): MAY,
    ("tabular-playground-series-may-2022", "public/sample_submission.csv"): ["id", "target"],
    ("tabular-playground-series-may-2022", "private/test.csv"): MAY + ["target"],
    ("leaf-classification", "public/train.csv"): LEAF[:1] + ["species"] + LEAF[1:],
    ("leaf-classification", "public/test.csv"): LEAF,
    ("nomad2018-predict-transparent-conductors", "public/train.csv"): NOMAD + NOMAD_Y,
    ("nomad2018-predict-transparent-conductors", "public/test.csv"): NOMAD,
    ("nomad2018-predict-transparent-conductors", "public/sample_submission.csv"):
        ["id"] + NOMAD_Y,
    ("nomad2018-predict-transparent-conductors", "private/test.csv"): NOMAD + NOMAD_Y,
    ("spooky-author-identification", "public/train.csv"): ["id", "text", "author"],
    ("spooky-author-identification", "public/test.csv"): ["id", "text"],
    ("spooky-author-identification", "public/sample_submission.csv"): ["id", "EAP", "HPL", "MWS"],
    ("spooky-author-identification", "private/test.csv"): ["id", "EAP", "HPL", "MWS"],
    ("lmsys-chatbot-arena", "public/train.csv"): LMSYS,
    ("lmsys-chatbot-arena", "public/test.csv"): ["id", "prompt", "response_a", "response_b"],
    ("lmsys-chatbot-arena", "public/sample_submission.csv"): ["id"] + LMSYS[-3:],
    ("lmsys-chatbot-arena", "private/answers.csv"): LMSYS,
    ("aerial-cactus-identification", "public/train.csv"): ["id", "has_cactus"],
    ("aerial-cactus-identification", "public/sample_submission.csv"): ["id", "has_cactus"],
    ("aerial-cactus-identification", "private/test.csv"): ["id", "has_cactus"],
    ("dogs-vs-cats-redux-kernels-edition", "public/sample_submission.csv"): ["id", "label"],
    ("dogs-vs-cats-redux-kernels-edition", "private/answers.csv"): ["id", "label"],
    ("plant-pathology-2020-fgvc7", "public/train.csv"): PLANT,
    ("plant-pathology-2020-fgvc7", "public/test.csv"): ["image_id"],
    ("plant-pathology-2020-fgvc7", "public/sample_submission.csv"): PLANT,
    ("plant-pathology-2020-fgvc7", "private/test.csv"): PLANT,
    ("spaceship-titanic", "public/train.csv"): SPACE + ["Transported"],
    ("spaceship-titanic", "public/test.csv"): SPACE,
    ("spaceship-titanic", "public/sample_submission.csv"): ["PassengerId", "Transported"],
    ("spaceship-titanic", "private/test.csv"): SPACE + ["Transported"],
    ("denoising-dirty-documents", "public/sampleSubmission.csv"): ["id", "value"],
    ("denoising-dirty-documents", "private/answers.csv"): ["id", "value"],
    ("statoil-iceberg-classifier-challenge", "private/test.csv"): ["id", "is_iceberg"],
    ("statoil-iceberg-classifier-challenge", "private/sample_submission.csv"):
        ["id", "is_iceberg"],
    ("whale-categorization-playground", "public/train.csv"): ["Image", "Id"],
    ("whale-categorization-playground", "public/sample_submission.csv"): ["Image", "Id"],
    ("whale-categorization-playground", "private/test.csv"): ["Image", "Id"],
    ("learning-agency-lab-automated-essay-scoring-2", "public/train.csv"):
        ["essay_id", "full_text", "score"],
    ("learning-agency-lab-automated-essay-scoring-2", "public/test.csv"):
        ["essay_id", "full_text"],
    ("learning-agency-lab-automated-essay-scoring-2", "public/sample_submission.csv"):
        ["essay_id", "score"],
    ("learning-agency-lab-automated-essay-scoring-2", "private/answers.csv"):
        ["essay_id", "full_text", "score"],
    ("jigsaw-toxic-comment-classification-challenge", "public/train.csv"):
        ["id", "comment_text"] + JIG,
    ("jigsaw-toxic-comment-classification-challenge", "public/test.csv"): ["id", "comment_text"],
    ("jigsaw-toxic-comment-classification-challenge", "public/sample_submission.csv"):
        ["id"] + JIG,
    ("jigsaw-toxic-comment-classification-challenge", "private/test.csv"): ["id"] + JIG,
    ("us-patent-phrase-to-phrase-matching", "public/train.csv"):
        ["id", "anchor", "target", "context", "score"],
    ("us-patent-phrase-to-phrase-matching", "public/test.csv"):
        ["id", "anchor", "target", "context"],
    ("us-patent-phrase-to-phrase-matching", "public/sample_submission.csv"): ["id", "score"],
    ("us-patent-phrase-to-phrase-matching", "private/test.csv"):
        ["id", "anchor", "target", "context", "score"],
    ("tabular-playground-series-dec-2021", "public/train.csv"): COVER + ["Cover_Type"],
    ("tabular-playground-series-dec-2021", "public/test.csv"): COVER,
    ("tabular-playground-series-dec-2021", "public/sample_submission.csv"): ["Id", "Cover_Type"],
    ("tabular-playground-series-dec-2021", "private/test.csv"): COVER + ["Cover_Type"],
    ("feedback-prize-english-language-learning", "public/train.csv"):
        ["text_id", "full_text"] + ELL,
    ("feedback-prize-english-language-learning", "public/test.csv"): ["text_id", "full_text"],
    ("feedback-prize-english-language-learning", "public/sample_submission.csv"):
        ["text_id"] + ELL,
    ("feedback-prize-english-language-learning", "private/answers.csv"): ["text_id"] + ELL,
}
PIZZA_TEST = [  # the fields of Kaggle's test.json, which prepare.py keeps in its test records
    "giver_username_if_known", "request_id", "request_text_edit_aware", "request_title",
    "requester_account_age_in_days_at_request",
    "requester_days_since_first_post_on_raop_at_request",
    "requester_number_of_comments_at_request", "requester_number_of_comments_in_raop_at_request",
    "requester_number_of_posts_at_request", "requester_number_of_posts_on_raop_at_request",
    "requester_number_of_subreddits_at_request", "requester_subreddits_at_request",
    "requester_upvotes_minus_downvotes_at_request",
    "requester_upvotes_plus_downvotes_at_request", "requester_username",
    "unix_timestamp_of_request", "unix_timestamp_of_request_utc"]
SAMPLE = {"detecting-insults-in-social-commentary": "sample_submission_null.csv",
          "random-acts-of-pizza": "sampleSubmission.csv",
          "denoising-dirty-documents": "sampleSubmission.csv"}
# MLE-bench's own sample for us-patent predicts 0 everywhere: Pearson's r is undefined
# (MLE-bench reports NaN), and our grader refuses it.
INVALID_SAMPLE = {"us-patent-phrase-to-phrase-matching": "constant"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("standins")
    assert standins.build(out, seed=0) == IDS
    return out


def _public_entries(pub):
    return {p.name + ("/" if p.is_dir() else "") for p in pub.iterdir()}


def _sample_csv(task, tmp_path):
    dest = tmp_path / "sample.csv"
    if task.id == "statoil-iceberg-classifier-challenge":
        members = common.read_7z(task.public_dir / "sample_submission.csv.7z")
        assert list(members) == ["sample_submission.csv"]
        dest.write_bytes(members["sample_submission.csv"])
    else:
        shutil.copy(task.public_dir / SAMPLE.get(task.id, "sample_submission.csv"), dest)
    return dest


def _perfect(task):
    answers = graders.read_csv_table(task.private_dir / task.answers_file, pandas_na=True)
    cols = task.grader.graded_columns(answers)
    sub = answers[[task.grader.id_col] + cols].copy()
    if task.id.startswith("jigsaw"):
        assert (sub[cols] == -1).all(axis=1).any()        # unscored rows, as in Kaggle's labels
        sub[cols] = sub[cols].mask(sub[cols] < 0, 0.5)
    return sub


def _public_test_columns(task) -> set:
    """Every column / field name in the public test data, wherever it lives."""
    pub = task.public_dir
    cols = set()
    if (pub / "test.csv").is_file():
        cols |= set(pd.read_csv(pub / "test.csv", nrows=5).columns)
    if (pub / "test.json").is_file():
        for rec in json.loads((pub / "test.json").read_text()):
            cols |= set(rec)
    if (pub / "test.json.7z").is_file():
        for rec in json.loads(common.read_7z(pub / "test.json.7z")["test.json"]):
            cols |= set(rec)
    return cols


@pytest.mark.parametrize("cid", IDS)
def test_layout_is_mlebench_prepared(built, cid):
    task = mlebench.make_task(built, cid)
    assert task.root == built / cid / "prepared" and task.metric == mlebench.SPECS[cid].metric
    text = task.description
    assert "(small stand-in)" in text and "## Submission" in text and len(text) > 400
    assert _public_entries(task.public_dir) == PUBLIC[cid]
    assert {p.name for p in task.private_dir.iterdir()} == PRIVATE[cid]
    for (c, rel), header in HEADERS.items():
        if c == cid:
            assert list(pd.read_csv(task.root / rel, nrows=2).columns) == header, rel


@pytest.mark.parametrize("cid", IDS)
def test_no_target_column_in_public_test(built, cid):
    task = mlebench.make_task(built, cid)
    answers = pd.read_csv(task.private_dir / task.answers_file, nrows=5)
    targets = set(task.grader.graded_columns(answers))
    public = _public_test_columns(task)
    if public:
        assert task.grader.id_col in public or cid.startswith("detecting-insults")
        assert not public & targets, public & targets
    if cid == "random-acts-of-pizza":             # nor the fields recorded after the outcome
        assert not any(c.endswith("_at_retrieval") for c in public)
        assert "requester_user_flair" not in public


@pytest.mark.parametrize("cid", IDS)
def test_grades_perfect_sample_and_missing_row(built, cid, tmp_path):
    task = mlebench.make_task(built, cid)
    perfect = _perfect(task)
    perfect.to_csv(tmp_path / "perfect.csv", index=False)
    best = graders.grade_submission(task, tmp_path / "perfect.csv")
    assert best["valid_submission"], best["message"]
    if task.is_lower_better:
        assert 0 <= best["score"] < 1e-9
    else:
        assert best["score"] == pytest.approx(1.0, abs=1e-9)
    sample = graders.grade_submission(task, _sample_csv(task, tmp_path))
    if cid in INVALID_SAMPLE:
        assert not sample["valid_submission"] and INVALID_SAMPLE[cid] in sample["message"]
    else:
        assert sample["valid_submission"], sample["message"]
        worse = sample["score"] > best["score"] if task.is_lower_better else \
            sample["score"] < best["score"]
        assert worse and np.isfinite(sample["score"])
    perfect.iloc[:-1].to_csv(tmp_path / "short.csv", index=False)
    short = graders.grade_submission(task, tmp_path / "short.csv")
    assert not short["valid_submission"] and "rows" in short["message"]


def test_sizes_are_small_but_not_tiny(built):
    for cid in IDS:
        task = mlebench.make_task(built, cid)
        answers = pd.read_csv(task.private_dir / task.answers_file)
        n = len(answers) if cid != "denoising-dirty-documents" else \
            len(list((task.public_dir / "test").glob("*.png")))
        assert (3 if cid.startswith("denoising") else 60) <= n <= 400, (cid, n)
        train = task.public_dir / "train.csv"
        if train.is_file() and mlebench.SPECS[cid].modality != "image":
            assert 800 <= len(pd.read_csv(train)) <= 2000, cid


def test_image_folders_and_archives_match_the_tables(built):
    pub = lambda cid: built / cid / "prepared" / "public"
    names = lambda folder: sorted(p.name for p in folder.iterdir())
    # dogs-vs-cats: folders and zips both; cat.N / dog.N numbered from 0 per class, test 1..N
    p = pub("dogs-vs-cats-redux-kernels-edition")
    train = names(p / "train")
    assert all(re.fullmatch(r"(cat|dog)\.\d+\.jpg", n) for n in train)
    for kind in ("cat", "dog"):
        nums = sorted(int(n.split(".")[1]) for n in train if n.startswith(kind))
        assert nums == list(range(len(nums))) and len(nums) > 100
    sample = pd.read_csv(p / "sample_submission.csv")
    assert names(p / "test") == sorted(f"{i}.jpg" for i in sample["id"])
    assert list(sample["id"]) == list(range(1, len(sample) + 1))
    for part in ("train", "test"):      # MLE-bench's compress: files at the archive's root
        assert sorted(zipfile.ZipFile(p / f"{part}.zip").namelist()) == names(p / part)
    # aerial-cactus: zips only, named by the ids of the tables
    p = pub("aerial-cactus-identification")
    assert sorted(zipfile.ZipFile(p / "train.zip").namelist()) == \
        sorted(pd.read_csv(p / "train.csv")["id"])
    test_ids = sorted(pd.read_csv(p / "sample_submission.csv")["id"])
    assert sorted(zipfile.ZipFile(p / "test.zip").namelist()) == test_ids
    assert all(re.fullmatch(r"[0-9a-f]{32}\.jpg", i) for i in test_ids)
    # random-acts-of-pizza: each zip holds its JSON file, byte for byte
    p = pub("random-acts-of-pizza")
    for part in ("train", "test"):
        z = zipfile.ZipFile(p / f"{part}.zip")
        assert z.namelist() == [f"{part}.json"]
        assert z.read(f"{part}.json") == (p / f"{part}.json").read_bytes()
    train = json.loads((p / "train.json").read_text())
    test = json.loads((p / "test.json").read_text())
    assert sorted(test[0]) == list(test[0]) == PIZZA_TEST and len(train[0]) == 32
    assert set(PIZZA_TEST) < set(train[0]) and list(train[0]) == sorted(train[0])
    assert isinstance(train[0]["requester_received_pizza"], bool)
    assert all(re.fullmatch(r"t3_[0-9a-z]{5}", r["request_id"]) for r in train)
    # leaf and plant: one image per row of train + test
    p = pub("leaf-classification")
    ids = list(pd.read_csv(p / "train.csv")["id"]) + list(pd.read_csv(p / "test.csv")["id"])
    assert names(p / "images") == sorted(f"{i}.jpg" for i in ids)
    p = pub("plant-pathology-2020-fgvc7")
    ids = list(pd.read_csv(p / "train.csv")["image_id"]) + \
        list(pd.read_csv(p / "test.csv")["image_id"])
    assert names(p / "images") == sorted(f"{i}.jpg" for i in ids)
    assert all(re.fullmatch(r"(Train|Test)_\d+", i) for i in ids)
    # nomad: train/<id>/geometry.xyz and test/<id>/geometry.xyz, ids 1.. in each
    p = pub("nomad2018-predict-transparent-conductors")
    for part in ("train", "test"):
        ids = list(pd.read_csv(p / f"{part}.csv")["id"])
        assert ids == list(range(1, len(ids) + 1))
        assert sorted(int(d.name) for d in (p / part).iterdir()) == ids
        xyz = (p / part / "1" / "geometry.xyz").read_text().splitlines()
        assert sum(line.startswith("lattice_vector ") for line in xyz) == 3
        atoms = [line.split()[-1] for line in xyz if line.startswith("atom ")]
        row = pd.read_csv(p / f"{part}.csv").iloc[0]
        assert len(atoms) == row["number_of_total_atoms"] and set(atoms) <= {"Al", "Ga", "In",
                                                                              "O"}
    # denoising: <n>.png pages; cleaned pages for train only; ids <n>_<row>_<col>
    p = pub("denoising-dirty-documents")
    assert names(p / "train") == names(p / "train_cleaned")
    assert not set(names(p / "train")) & set(names(p / "test"))
    ids = pd.read_csv(p / "sampleSubmission.csv")["id"]
    stems = {n[:-4] for n in names(p / "test")}
    assert set(ids.str.split("_").str[0]) == stems and ids.str.fullmatch(r"\d+_\d+_\d+").all()
    # statoil: the JSON records as the competition's
    p = pub("statoil-iceberg-classifier-challenge")
    rec = json.loads(common.read_7z(p / "train.json.7z")["train.json"])[0]
    assert list(rec) == ["id", "band_1", "band_2", "inc_angle", "is_iceberg"]
    assert len(rec["band_1"]) == len(rec["band_2"]) == 32 * 32
    # whale: the images of each table, and new_whale among the answers
    p = pub("whale-categorization-playground")
    assert names(p / "train") == sorted(pd.read_csv(p / "train.csv")["Image"])
    assert names(p / "test") == sorted(pd.read_csv(p / "sample_submission.csv")["Image"])
    answers = pd.read_csv(built / "whale-categorization-playground" / "prepared" / "private" /
                          "test.csv")
    assert (answers["Id"] == "new_whale").any()
    assert set(answers["Id"]) - {"new_whale"} <= set(pd.read_csv(p / "train.csv")["Id"])


def test_build_is_deterministic_and_seeded(built, tmp_path):
    some = ["detecting-insults-in-social-commentary", "statoil-iceberg-classifier-challenge",
            "dogs-vs-cats-redux-kernels-edition"]
    assert standins.build(tmp_path / "again", ids=some, seed=0) == [i for i in IDS if i in some]
    files = ["detecting-insults-in-social-commentary/prepared/public/train.csv",
             "detecting-insults-in-social-commentary/prepared/private/test.csv",
             "statoil-iceberg-classifier-challenge/prepared/public/train.json.7z",
             "dogs-vs-cats-redux-kernels-edition/prepared/public/train.zip",
             "dogs-vs-cats-redux-kernels-edition/prepared/description.md"]
    for f in files:
        assert (tmp_path / "again" / f).read_bytes() == (built / f).read_bytes(), f
    standins.build(tmp_path / "other", ids=some[:1], seed=1)
    assert (tmp_path / "other" / files[0]).read_bytes() != (built / files[0]).read_bytes()
    with pytest.raises(ValueError, match="No stand-in"):
        standins.build(tmp_path / "x", ids=["not-a-competition"])


def test_cli_writes_the_chosen_ids(tmp_path, capsys):
    from mle_rl.env.standins.__main__ import main

    main(["--out", str(tmp_path), "--ids", "spaceship-titanic", "--seed", "3"])
    assert [p.name for p in tmp_path.iterdir()] == ["spaceship-titanic"]
    assert "wrote 1 competitions" in capsys.readouterr().out
    mlebench.make_task(tmp_path, "spaceship-titanic")
