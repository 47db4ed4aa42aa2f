r"""The warm start (ML-Agent): builds a policy from nothing, then measures it.

  python experiments/warm_start.py --flagfile=experiments/warm_start.flags

Stages, each with progress lines: the expert corpus (programs from the action pool, run in
the sandbox), a byte-level BPE, SFT of `tiny()`, the HF policy directory; then, unless
--eval_samples=0, N samples per task at --temperature, run in the sandbox (valid
fraction, model families, LM-instrumenter hits). --holdout_tasks trains on the other tasks
and also evaluates on the held-out ones (cross-task generalization). Writes
--report_dir/warm_start.{md,json,png}; the markdown's new build goes on top of the earlier
builds' sections, which it keeps (`mle_rl/io/report_file.py`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import time

from absl import app, flags

import sys

from mle_rl import config
from mle_rl.env import tasks
from mle_rl.io import report_file
from mle_rl.warmstart import evaluate, pipeline, report, sft, sft_data

_OUT = flags.DEFINE_string("out_dir", None, "Policy directory (default: the cached default "
                           "policy, <cache>/policies/default).")
_TASKS = flags.DEFINE_list("tasks", list(tasks.BUILTIN_TASKS), "Built-in tasks.")
_HOLDOUT = flags.DEFINE_list("holdout_tasks", [], "Tasks left out of the corpus (evaluated).")
_N = flags.DEFINE_integer("n_per_task", 24, "Programs executed per built-in task for the corpus.")
_GEN = flags.DEFINE_integer("generated", 120, "Procedural tasks in the corpus (env/procedural).")
_PER_GEN = flags.DEFINE_integer("per_generated", 2, "Programs executed per procedural task.")
_TEXT_SHARE = flags.DEFINE_float("text_share", 0.25, "Share of the procedural tasks that have a "
                                 "free-text column (docstrings: env/procedural/text_sources.py).")
_REPEAT = flags.DEFINE_integer("builtin_repeat", 3, "Times SFT sees each built-in task's "
                               "solve examples.")
_VOCAB = flags.DEFINE_integer("vocab_size", 16384, "BPE vocabulary size.")
_SFT_STEPS = flags.DEFINE_integer("sft_steps", 640, "SFT steps (the learning rate's cosine runs "
                                  "over them); 0: train for --sft_minutes instead (a policy "
                                  "that depends on the machine's speed).")
_SFT_MIN = flags.DEFINE_float("sft_minutes", 20.0, "Wall-clock guard of SFT (minutes); with "
                              "--sft_steps=0, its time budget.")
_EPOCHS = flags.DEFINE_float("max_epochs", 10.0, "Most SFT epochs.")
_LR = flags.DEFINE_float("lr", 2e-3, "Peak SFT learning rate.")
_TPB = flags.DEFINE_integer("tokens_per_batch", 2048, "Tokens per SFT batch (padded).")
_SOLVE_TOK = flags.DEFINE_integer("solve_prompt_tokens", 128, "Solve-prompt token budget.")
_IMP_TOK = flags.DEFINE_integer("improve_prompt_tokens", 512, "Improve-prompt token budget.")
_BUCKETS = flags.DEFINE_list("buckets", ["128", "192", "256", "384", "640"],
                             "SFT sequence-length buckets (one compiled shape each); the "
                             "largest is the longest sequence kept.")
_RESP_TOK = flags.DEFINE_integer("response_tokens", 512, "Response token budget.")
_IMP_MAX = flags.DEFINE_integer("improve_max", 200, "Most improve examples in the SFT mix (those "
                                "of the built-in tasks first).")
_INS_MAX = flags.DEFINE_integer("instrument_max", 150, "Most instrumentation examples in the mix "
                                "(those of the image, text and span programs first).")
_CORPUS = flags.DEFINE_string("corpus_dir", None, "Corpus cache (default: beside the policy).")
_EVAL_N = flags.DEFINE_integer("eval_samples", 32, "Samples per task (0: no evaluation).")
_TEMP = flags.DEFINE_float("temperature", 0.7, "Sampling temperature of the evaluation.")
_REPORT = flags.DEFINE_string("report_dir", "experiments/results", "Where the report goes.")
_FORCE = flags.DEFINE_bool("force", False, "Rebuild even when the policy is current.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
config.define_sandbox_flag()


def main(argv):
    del argv
    try:
        config.require_sandbox(flags.FLAGS.sandbox)  # the corpus runs generated programs
    except config.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from mle_rl.runtime import compile_cache
    compile_cache.enable()    # compiled executables reused across processes
    settings = pipeline.WarmStartSettings(
        task_ids=tuple(_TASKS.value), holdout_tasks=tuple(_HOLDOUT.value),
        n_per_task=_N.value, generated=_GEN.value, per_generated=_PER_GEN.value,
        text_share=_TEXT_SHARE.value,
        vocab_size=_VOCAB.value,
        budgets=sft_data.Budgets(solve_prompt=_SOLVE_TOK.value,
                                 improve_prompt=_IMP_TOK.value, response=_RESP_TOK.value,
                                 sequence=max(int(b) for b in _BUCKETS.value)),
        sft=sft.SFTConfig(lr=_LR.value, time_budget_s=_SFT_MIN.value * 60,
                          max_steps=_SFT_STEPS.value or None,
                          buckets=tuple(sorted(int(b) for b in _BUCKETS.value)),
                          max_epochs=_EPOCHS.value, tokens_per_batch=_TPB.value,
                          seed=_SEED.value),
        improve_max=_IMP_MAX.value, instrument_max=_INS_MAX.value,
        builtin_repeat=_REPEAT.value, seed=_SEED.value)
    out = pathlib.Path(_OUT.value) if _OUT.value else pipeline.default_policy_dir()
    same = settings == pipeline.WarmStartSettings()
    print(f"settings {'are' if same else 'differ from'} the default policy's "
          f"(hash {pipeline.source_hash(settings)}); policy dir {out}")
    t0 = time.time()
    if _FORCE.value or not pipeline.is_current(out, settings):
        summary = pipeline.build(out, settings, corpus_dir=_CORPUS.value)
    else:
        print(f"policy at {out} is current; reusing it (--force to rebuild)")
        summary = json.loads((out / pipeline.MARKER).read_text())
    print(f"build: {summary['build_seconds']:.0f} s")
    results = []
    if _EVAL_N.value > 0:
        print(f"evaluation: {_EVAL_N.value} samples per task at temperature {_TEMP.value}")
        results = evaluate.evaluate(out, settings.task_ids, n=_EVAL_N.value,
                                    temperature=_TEMP.value, seed=_SEED.value,
                                    solve_tokens=_SOLVE_TOK.value,
                                    max_new_tokens=_RESP_TOK.value)
    rdir = pathlib.Path(_REPORT.value)
    rdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "sft_loss.png", rdir / "warm_start_sft_loss.png")
    (rdir / "warm_start.json").write_text(json.dumps({"summary": summary, "eval": results},
                                                     indent=1))
    report_file.write_keeping_history(rdir / "warm_start.md",
                                      report.markdown(summary, results, settings))
    print(report.closing_note(summary, results))
    print(f"total {time.time() - t0:.0f} s; report in {rdir / 'warm_start.md'}")


if __name__ == "__main__":
    from mle_rl.runtime import allocator
    allocator.reexec_with_tcmalloc()  # XLA:CPU temporaries without page faults
    app.run(main)
