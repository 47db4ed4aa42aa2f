"""Best-of-N evaluation of a policy on tasks, both modes (solve, and improve the best so far).

    python experiments/evaluate.py --policy_dir=runs/tabular/policy --tasks=tabular-synth --n=32
    # best@k curves from 128 i.i.d. samples, plotted beside another policy's:
    python experiments/evaluate.py --policy_dir=... --n=128 --noimprove --out=runs/rl \
        --plot=runs/best_at_k.png --compare=SFT:runs/sft.json
    # AIDE-style greedy search: one batch of drafts, then improve the best so far, 200 programs
    python experiments/evaluate.py --search=greedy --n=200 --out=runs/greedy

Prints a markdown table (metric and direction per task; best@k for k = 1, 2, 4, ... over
the solve samples) and writes it, with JSON (every sample's score in `scores`, `best_at_k`),
to --out.
"""

import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

flags.DEFINE_string("policy_dir", "default", "HF policy dir, 'default' or 'random'.")
flags.DEFINE_string("model_preset", "tiny", "Preset for --policy_dir=random.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter/compute dtype.")
flags.DEFINE_list("tasks", ["tabular-synth"], "Task ids.")
flags.DEFINE_integer("n", 32, "Samples per task (best-of-N).")
flags.DEFINE_bool("improve", True, "Half of the samples improve the best so far (best@k is "
                  "computed over the solve samples only: --noimprove for all n).")
flags.DEFINE_enum("search", "sample", ["sample", "greedy"], "sample: solve samples (and improve "
                  "rounds with --improve); greedy: an AIDE-style search, one batch of drafts "
                  "then every round improves the best program so far (--n programs in all).")
flags.DEFINE_string("plot", None, "Write the best@k curves (this policy and --compare) to this "
                    "PNG, one per task (the task id is added to the name when several).")
flags.DEFINE_list("compare", [], "LABEL:PATH.json of earlier evaluations to plot beside this one.")
flags.DEFINE_float("temperature", 0.7, "Sampling temperature. Compare policies at one "
                   "temperature; an RL policy is what it is at its training temperature "
                   "(launch/rl_gain.sh passes that one to both; experiments/results/"
                   "rl_gain_build5_klloss_t1.md shows a policy that differs at 0.7).")
flags.DEFINE_float("top_p", 1.0, "Nucleus sampling.")
flags.DEFINE_integer("max_prompt_tokens", 768, "Prompt budget (a warm-start policy's prompts are "
                     "also held to the lengths it was fine-tuned on: its warmstart.json).")
flags.DEFINE_integer("max_new_tokens", 512, "Response budget.")
flags.DEFINE_integer("sample_batch", 8, "Prompts sampled together.")
flags.DEFINE_integer("num_actors", 2, "Actor subprocesses.")
flags.DEFINE_enum("instrument", "ast", ["ast", "none"], "Instrumentation of the programs.")
flags.DEFINE_enum("reward", "rl4mle", ["rl4mle", "mlagent"], "Reward scheme (reported).")
flags.DEFINE_string("mlebench_dir", None, "MLE-bench prepared data.")
flags.DEFINE_string("cache_dir", None, "Cache of built-in tasks and the default policy.")
flags.DEFINE_string("label", "ours", "Column label in the table.")
flags.DEFINE_string("out", None, "Write OUT.md and OUT.json.")
flags.DEFINE_integer("seed", 0, "Random seed.")
flags.DEFINE_float("timeout_s", None, "Each program's time limit in seconds, at most (default: "
                   "each task's own; an MLE-bench competition's is an hour).")
from mle_rl import config  # noqa: E402

config.define_sandbox_flag()
config.define_task_dir_flag()
FLAGS = flags.FLAGS


def main(argv):
    del argv
    import jax
    from flax import nnx

    from mle_rl.agent import evaluation
    from mle_rl.agent.components import load_policy
    from mle_rl.warmstart.states import trained_prompt_budgets
    from mle_rl.env import tasks as env_tasks
    from mle_rl.models import hf
    from mle_rl.models.hf import CheckpointError
    try:
        config.require_sandbox(FLAGS.sandbox)  # no isolation: refuse before anything runs
    except config.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from mle_rl.runtime import compile_cache
    compile_cache.enable()    # compiled executables reused across processes
    try:
        tasks = {t: env_tasks.get_task(t, mlebench_dir=FLAGS.mlebench_dir,
                                       cache_dir=FLAGS.cache_dir, task_dir=FLAGS.task_dir)
                 for t in FLAGS.tasks}
        if FLAGS.timeout_s is not None:
            if FLAGS.timeout_s <= 0:
                raise config.ConfigError(f"--timeout_s must be positive, got {FLAGS.timeout_s}.")
            tasks = {k: dataclasses.replace(t, timeout_s=min(t.timeout_s, FLAGS.timeout_s))
                     for k, t in tasks.items()}
        model, tok, path = load_policy(FLAGS.policy_dir, preset=FLAGS.model_preset,
                                    dtype=FLAGS.dtype, cache_dir=FLAGS.cache_dir,
                                    seed=FLAGS.seed)
    except (env_tasks.UnknownTask, env_tasks.user_tasks.TaskSpecError, CheckpointError,
            config.ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dtypes = sorted({str(x.dtype) for x in jax.tree.leaves(nnx.state(model, nnx.Param))})
    print(f"[eval] policy {FLAGS.policy_dir} ({type(model).__name__}, "
          f"{sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))):,} parameters, "
          f"{'/'.join(dtypes)})", flush=True)
    try:
        results = evaluation.best_of_n(
            model, tok, tasks, FLAGS.n, improve=FLAGS.improve or FLAGS.search == "greedy",
            n_solve=min(FLAGS.sample_batch, FLAGS.n) if FLAGS.search == "greedy" else None,
            seed=FLAGS.seed,
            num_actors=FLAGS.num_actors, temperature=FLAGS.temperature, top_p=FLAGS.top_p,
            max_prompt_tokens=FLAGS.max_prompt_tokens, max_new_tokens=FLAGS.max_new_tokens,
            sample_batch=FLAGS.sample_batch, instrument=FLAGS.instrument, reward=FLAGS.reward,
            cache_dir=FLAGS.cache_dir, mlebench_dir=FLAGS.mlebench_dir,
            task_dir=FLAGS.task_dir, trained_budgets=trained_prompt_budgets(path),
            log=lambda line: print(line, flush=True))
    except evaluation.PromptBudgetError as e:
        print(f"error: --max_prompt_tokens: {e}", file=sys.stderr)
        return 2
    table = evaluation.markdown_table(results, FLAGS.label)
    print(table)
    if FLAGS.out:
        os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
        with open(FLAGS.out + ".md", "w") as f:
            f.write(table + "\n")
        rows = evaluation.results_to_json(results)
        policy = {"dir": str(FLAGS.policy_dir), "fingerprint": hf.fingerprint(model)}
        sampling = {"temperature": FLAGS.temperature, "top_p": FLAGS.top_p, "seed": FLAGS.seed}
        for row in rows.values():      # which policy this was (a rebuild is another one),
            row["policy"] = policy     # and how it was sampled
            row["sampling"] = sampling
        with open(FLAGS.out + ".json", "w") as f:
            json.dump(rows, f, indent=2)
    if FLAGS.plot:
        plot_curves(results, FLAGS.plot, FLAGS.compare, FLAGS.label)
    return 0


def plot_curves(results: dict, png: str, compare: list, label: str) -> None:
    """best@k of this evaluation and of the `LABEL:PATH.json` ones, one PNG per task; all
    curves of a task share one floor (the sample submission's score)."""
    import pathlib

    from mle_rl.agent import best_at_k as bak
    from mle_rl.io import curves
    others = {}
    for item in compare:
        name, _, path = item.partition(":")
        with open(path or name) as f:
            others[name if path else pathlib.Path(name).stem] = json.load(f)
    for tid, r in results.items():
        sets = {label: r.solve_scores()}
        for name, ev in others.items():
            if tid in ev:
                e = ev[tid]
                sets[name] = [s for s, m in zip(e["scores"], e["modes"]) if m == "solve"]
        floor = bak.floor_of([x for v in sets.values() for x in v], r.baseline,
                             r.is_lower_better)
        if floor is None:
            continue
        data = {name: bak.best_at_k(v, bak.powers_of_two(len(v)),
                                    is_lower_better=r.is_lower_better, floor=floor)
                for name, v in sets.items()}
        out = pathlib.Path(png)
        if len(results) > 1:
            out = out.with_name(f"{out.stem}_{tid}{out.suffix}")
        curves.plot_best_at_k(data, out, title=tid, metric=r.metric,
                              is_lower_better=r.is_lower_better,
                              baselines={"sample submission": r.baseline})
        print(f"[eval] best@k curves: {out}")


if __name__ == "__main__":
    from mle_rl.runtime import allocator
    allocator.reexec_with_tcmalloc()  # XLA:CPU temporaries without page faults
    app.run(main)
