"""The pure helpers of benchmarks/bench_tunix.py (the Tunix side itself needs the network
and is run by hand: `python benchmarks/bench_tunix.py --quick`)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_tunix  # noqa: E402


def test_args_defaults_quick_and_models():
    a = bench_tunix.parse_args([])
    assert (a.batch, a.prompt_len, a.new_tokens, a.repeats) == (16, 32, 512, 3)
    assert a.models == [bench_tunix.ModelSpec("tiny"), bench_tunix.ModelSpec("qwen2p5_0p5b", 4)]
    assert a.modes == ["sample", "greedy"]
    q = bench_tunix.parse_args(["--quick", "--models", "tiny", "--modes", "greedy"])
    assert (q.batch, q.new_tokens, q.repeats, q.modes) == (4, 64, 2, ["greedy"])
    cfg = bench_tunix.model_config(bench_tunix.ModelSpec("qwen2p5_0p5b", 4))
    assert (cfg.num_layers, cfg.hidden_size, cfg.vocab_size) == (4, 896, 151936)
    assert bench_tunix.ModelSpec("qwen2p5_0p5b", 4).label == "qwen2p5_0p5b:4"


@pytest.mark.parametrize("argv", [["--models", "nope"], ["--models", "tiny:x"],
                                  ["--models", "tiny:0"], ["--modes", "beam"],
                                  ["--batch", "0"]])
def test_args_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bench_tunix.parse_args(argv)
    assert e.value.code == 2


def test_venv_flag_and_env(monkeypatch, tmp_path):
    monkeypatch.setenv(bench_tunix.ENV_VENV, str(tmp_path / "from_env"))
    assert bench_tunix.parse_args([]).tunix_venv == tmp_path / "from_env"
    args = bench_tunix.parse_args(["--tunix-venv", str(tmp_path / "x")])
    assert args.tunix_venv == tmp_path / "x"


def test_pins_follow_constraints(tmp_path):
    c = tmp_path / "constraints.txt"
    c.write_text("# comment\njax==0.1.2\njaxlib==0.1.3\nflax==0.4.5\nnumpy==2.0\n")
    pins = bench_tunix.pinned_versions(c)
    assert pins == {"jax": "0.1.2", "jaxlib": "0.1.3", "flax": "0.4.5"}
    assert bench_tunix.install_spec(pins) == [
        "google-tunix==0.1.7", "jax==0.1.2", "jaxlib==0.1.3", "flax==0.4.5"]
    assert set(bench_tunix.pinned_versions()) == {"jax", "jaxlib", "flax"}   # the real file


def test_no_network_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    """pip failing (as without PyPI) gives one line on stderr and exit 2, no traceback;
    the half-made venv is removed by the next attempt."""
    venv = tmp_path / "tunix"

    def fake_run(cmd, log, title):
        if title == "venv":
            venv.mkdir()
            (venv / "pyvenv.cfg").write_text("")
            return 0
        with open(log, "a") as f:
            f.write("Looking in indexes: ...\nERROR: Could not find a version that satisfies "
                    "the requirement google-tunix==0.1.7 (from versions: none)\n")
        return 1

    monkeypatch.setattr(bench_tunix, "_run_logged", fake_run)
    assert bench_tunix.main(["--tunix-venv", str(venv), "--setup-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench_tunix: cannot create the Tunix venv")
    assert "Could not find a version" in err[0] and "install.log" in err[0]
    assert (venv / bench_tunix.INSTALLING).exists()
    assert bench_tunix.main(["--tunix-venv", str(venv), "--setup-only"]) == 2   # retried
    assert not (venv / bench_tunix.MARKER).exists()


def test_not_a_venv_refused(tmp_path):
    (tmp_path / "somefile").write_text("x")
    with pytest.raises(bench_tunix.SetupError, match="is not a venv"):
        bench_tunix.ensure_tunix_venv(tmp_path, {})


def test_lengths_checked():
    bench_tunix.check_lengths("ours", [4, 4], 2, 4)
    with pytest.raises(bench_tunix.SideError, match="exactly 4 new tokens"):
        bench_tunix.check_lengths("Tunix", [4, 3], 2, 4)
    with pytest.raises(bench_tunix.SideError):
        bench_tunix.check_lengths("Tunix", [4], 2, 4)


def test_prompts_and_greedy_agreement():
    p = bench_tunix.make_prompts(3, 5, 10, seed=0)
    assert p == bench_tunix.make_prompts(3, 5, 10, seed=0)
    assert len(p) == 3 and all(len(r) == 5 and all(1 <= t < 10 for t in r) for r in p)
    a = bench_tunix.greedy_agreement([[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 3, 4], [5, 0, 7, 8]])
    assert a == {"token_match": 7 / 8, "rows_equal": 1, "rows": 2, "median_first_diff": 2.5}


def test_table_and_compile_summary():
    row = bench_tunix.Row("tiny", "greedy", 200.0, 100.0, 5.0, 2.0, 1.0, 3.0,
                          {"token_match": 1.0, "rows_equal": 4, "rows": 4,
                           "median_first_diff": 64})
    assert row.ratio == 2.0 and row.cpu_ratio == 3.0
    table = bench_tunix.format_table([row])
    assert "2.00x" in table and "3.00x" in table and "100.0% (4/4 rows" in table
    s = bench_tunix.compile_summary([["_decode_fn", 1.5], ["add", 0.01]])
    assert s.startswith("2 XLA compilations, 1.51 s") and "_decode_fn 1.50 s" in s
    assert "add" not in s
