"""Best-of-N evaluation of a policy on tasks, both modes (solve, and improve the best so far).

    python experiments/evaluate.py --policy_dir=runs/tabular/policy --tasks=tabular-synth --n=32

Prints a markdown table (metric and direction per task) and writes it, with JSON, to --out.
"""

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
flags.DEFINE_bool("improve", True, "Half of the samples improve the best so far.")
flags.DEFINE_float("temperature", 0.7, "Sampling temperature.")
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
        model, tok, path = load_policy(FLAGS.policy_dir, preset=FLAGS.model_preset,
                                    dtype=FLAGS.dtype, cache_dir=FLAGS.cache_dir,
                                    seed=FLAGS.seed)
    except (env_tasks.UnknownTask, env_tasks.user_tasks.TaskSpecError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dtypes = sorted({str(x.dtype) for x in jax.tree.leaves(nnx.state(model, nnx.Param))})
    print(f"[eval] policy {FLAGS.policy_dir} ({type(model).__name__}, "
          f"{sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))):,} parameters, "
          f"{'/'.join(dtypes)})", flush=True)
    try:
        results = evaluation.best_of_n(
            model, tok, tasks, FLAGS.n, improve=FLAGS.improve, seed=FLAGS.seed,
            num_actors=FLAGS.num_actors, temperature=FLAGS.temperature, top_p=FLAGS.top_p,
            max_prompt_tokens=FLAGS.max_prompt_tokens, max_new_tokens=FLAGS.max_new_tokens,
            sample_batch=FLAGS.sample_batch, instrument=FLAGS.instrument, reward=FLAGS.reward,
            cache_dir=FLAGS.cache_dir, mlebench_dir=FLAGS.mlebench_dir,
            task_dir=FLAGS.task_dir, trained_budgets=trained_prompt_budgets(path))
    except evaluation.PromptBudgetError as e:
        print(f"error: --max_prompt_tokens: {e}", file=sys.stderr)
        return 2
    table = evaluation.markdown_table(results, FLAGS.label)
    print(table)
    if FLAGS.out:
        os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
        with open(FLAGS.out + ".md", "w") as f:
            f.write(table + "\n")
        with open(FLAGS.out + ".json", "w") as f:
            json.dump(evaluation.results_to_json(results), f, indent=2)
    return 0


if __name__ == "__main__":
    from mle_rl.runtime import allocator
    allocator.reexec_with_tcmalloc()  # XLA:CPU temporaries without page faults
    app.run(main)
