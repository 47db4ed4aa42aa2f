"""The corpus builder on a tiny subset (1 task, 3 programs), really run in the sandbox."""

import json

from mle_rl.warmstart import corpus, lm_instrument


def test_corpus_on_one_task(tmp_path):
    settings = corpus.CorpusSettings(task_ids=("breast-cancer-diagnosis",), n_per_task=3,
                                     chain=2)
    logs = []
    stats = corpus.build(tmp_path, settings, log=logs.append)
    assert stats["programs"] == 3 and not stats["cached"]
    steps = corpus.read_jsonl(tmp_path / corpus.STEPS_FILE)
    assert len(steps) == 3 and len({s["family"] for s in steps}) == 3
    for s in steps:
        assert set(s) >= {"plan", "code", "output", "score", "duration_s", "status", "hits"}
        assert s["duration_s"] > 0
    ok = [s for s in steps if s["status"] == "ok"]
    assert ok, [s["error"] for s in steps]
    assert all(0.5 < s["score"] <= 1 for s in ok)          # AUC of real runs
    assert all(len(s["hits"]) >= 3 for s in ok)            # instrumented while running
    ex = corpus.load_examples(tmp_path)
    assert len(ex["solve"]) == len(ok) == len(ex["instrument"])
    for e in ex["instrument"]:
        assert lm_instrument.LMInstrumenter(lambda p: e["answer"]).check(e["code"], e["answer"])
    for e in ex["improve"]:                                  # the response beats the previous
        better = [s["score"] for s in ok if s["code"] == e["code"]][0]
        assert better > e["prev"]["score"]
    states = corpus.read_jsonl(tmp_path / corpus.STATES_FILE)
    assert [s["step"] for s in states] == [0, 1, 0]          # chains of 2: [a, b], [c]
    assert states[1]["history"][0]["code"] == steps[0]["code"]
    # a second build reuses the cache
    again = corpus.build(tmp_path, settings, log=logs.append)
    assert again["cached"] and json.loads((tmp_path / corpus.STATS_FILE).read_text())
