"""The trainer's parts, built from a `RunConfig`; `trainer.py` is the loop that uses them.

    tasks = load_tasks(cfg)                                  # first: a bad id fails at once
    model, tokenizer, policy_dir = load_policy(cfg.model.policy_dir, ...)
    instrumenter = instrumenter_spec(cfg, policy_dir)        # 'ast' | 'none' | 'lm:<dir>'
    source = make_prompt_source(cfg, tasks, archive, count_tokens, policy_dir)
    pool = make_actor_pool(cfg, tasks, instrumenter)
    checkpointer, logger = make_checkpointer(cfg, workdir), make_logger(cfg, workdir, ...)

A setting that cannot work raises `ConfigError` (one line for a person), before anything
expensive has started where that is possible.
"""

from __future__ import annotations

import json
import pathlib
from typing import Optional

import jax

from mle_rl.agent.actors import ActorPool
from mle_rl.agent.prompt_sources import Archive, ExpertPrompts, MixedSource, TaskPromptSource
from mle_rl.config import ConfigError, RunConfig
from mle_rl.env import tasks as env_tasks
from mle_rl.io import checkpoint as ckpt
from mle_rl.io import metrics_log, policy
from mle_rl.models import sharding as shd
from mle_rl.runtime import distributed


def load_tasks(cfg: RunConfig) -> dict:
    """{task id: Task} of `--tasks`; an unknown id is a `ConfigError`."""
    tasks = {}
    for tid in cfg.env.tasks:
        try:
            tasks[tid] = env_tasks.get_task(tid, mlebench_dir=cfg.env.mlebench_dir,
                                            cache_dir=cfg.env.cache_dir,
                                            task_dir=cfg.env.task_dir)
        except (env_tasks.UnknownTask, env_tasks.user_tasks.TaskSpecError) as e:
            raise ConfigError(str(e)) from None
    return tasks


def resolve_policy_dir(policy_dir: Optional[str], cache_dir: Optional[str], log=print):
    """'default' -> the cached default policy (built when missing); else the path or None."""
    if policy_dir == "default":
        from mle_rl.warmstart import pipeline
        return pathlib.Path(pipeline.ensure_default_policy(cache_dir=cache_dir, log=log))
    return None if policy_dir in (None, "random") else pathlib.Path(policy_dir)


def load_policy(policy_dir: Optional[str], *, preset: str = "tiny", dtype: str = "float32",
                cache_dir: Optional[str] = None, seed: int = 0, log=print):
    """`--policy_dir` -> (model, tokenizer, resolved_dir or None).

    An HF checkpoint directory; `default` (the cached CPU default policy that the warm
    start builds, built first when missing); or `random` (random init of `preset` with a
    byte-level tokenizer, for tests and smoke runs: it writes no working code). A
    warm-start record (`warmstart.json`) this version cannot read is a `ConfigError`."""
    from mle_rl.warmstart.states import WarmStartRecordError, trained_prompt_budgets

    path = resolve_policy_dir(policy_dir, cache_dir, log)
    try:
        trained_prompt_budgets(path)          # before the weights: fail fast, write nothing
    except WarmStartRecordError as e:
        raise ConfigError(str(e)) from None
    model, tokenizer = policy.load(path, preset=preset, dtype=dtype, seed=seed)
    return model, tokenizer, path


def instrumenter_spec(cfg: RunConfig, policy_dir: Optional[pathlib.Path]) -> str:
    """'ast' | 'none' | 'lm:<dir>': the frozen LM is the instrumenter checkpoint given, or
    the policy as loaded at the start (never the policy being trained)."""
    if cfg.env.instrument != "lm":
        return cfg.env.instrument
    frozen = cfg.model.instrumenter_dir or policy_dir
    if frozen is None:
        raise ConfigError("--instrument=lm needs a frozen model: pass --instrumenter_dir "
                          "or a --policy_dir checkpoint (not 'random').")
    return f"lm:{frozen}"


def sample_mesh(mesh):
    """The sampler's mesh: this host's devices only (each host samples for its own actors,
    with no cross-host lockstep), as wide on `model` as the learner's mesh allows."""
    return distributed.host_local_mesh(
        model=min(mesh.shape[shd.MODEL], jax.local_device_count()))


def make_prompt_source(cfg: RunConfig, tasks: dict, archive: Archive, count_tokens,
                       policy_dir: Optional[pathlib.Path]):
    """`--prompt_source`: the tasks' own solve/improve prompts, the warm start's expert
    states (`expert_states`, from `policy_dir/states.jsonl`), or a mix of both. A
    warm-start policy's prompts are fitted to the lengths it was fine-tuned on (capped by
    --max_prompt_tokens), as in evaluation: it reads longer ones badly."""
    from mle_rl.warmstart.states import trained_prompt_budgets

    limit = cfg.sampling.max_prompt_tokens
    trained = trained_prompt_budgets(policy_dir) or {}
    solve_tokens = min(limit, trained.get("solve", limit))
    improve_tokens = min(limit, trained.get("improve", limit))
    own = TaskPromptSource(tasks, archive, self_improve=cfg.env.self_improve,
                           max_tokens=solve_tokens, improve_tokens=improve_tokens,
                           count_tokens=count_tokens)
    if cfg.env.prompt_source == "tasks":
        return own
    if policy_dir is None:
        raise ConfigError(f"--prompt_source={cfg.env.prompt_source} needs a policy directory "
                          f"with a states pool (states.jsonl), e.g. --policy_dir=default.")
    from mle_rl.warmstart.states import ExpertStatesSource
    try:
        expert = ExpertPrompts(ExpertStatesSource(
            policy_dir, task_ids=tuple(tasks), count_tokens=count_tokens,
            solve_tokens=solve_tokens, improve_tokens=improve_tokens,
            mlebench_dir=cfg.env.mlebench_dir, cache_dir=cfg.env.cache_dir,
            task_dir=cfg.env.task_dir))
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(str(e)) from None
    if cfg.env.prompt_source == "expert_states":
        return expert
    return MixedSource(own, expert, cfg.env.expert_fraction)


def make_actor_pool(cfg: RunConfig, tasks: dict, instrumenter: str, *,
                    work_fn: Optional[str] = None,
                    extra_work_kwargs: Optional[dict] = None) -> ActorPool:
    """The actors, running the real environment (or `work_fn` with `extra_work_kwargs` on
    top, for benchmarks); an action's hang limit is its task's time limit."""
    timeouts = {tid: (cfg.env.timeout_s or t.timeout_s) for tid, t in tasks.items()}
    work = dict(mlebench_dir=cfg.env.mlebench_dir, cache_dir=cfg.env.cache_dir,
                task_dir=cfg.env.task_dir, instrumenter=instrumenter, reward_scheme=cfg.env.reward,
                timeout_s=cfg.env.timeout_s, memory_mb=cfg.env.memory_mb,
                warm_pool={"size": 1} if cfg.actors.warm_pool else None)
    work.update(extra_work_kwargs or {})
    pool_kw = {"work_fn": work_fn} if work_fn else {}
    return ActorPool(cfg.actors.num_actors, work_kwargs=work,
                     action_timeout_s=lambda r: timeouts[r.task_id], **pool_kw)


def make_checkpointer(cfg: RunConfig, workdir: pathlib.Path) -> ckpt.Checkpointer:
    ckpt.quiet_orbax_logging()
    return ckpt.Checkpointer(workdir / "checkpoints", keep=cfg.keep_checkpoints)


def make_logger(cfg: RunConfig, workdir: pathlib.Path,
                resume_step: Optional[int]) -> metrics_log.MetricsLogger:
    """metrics.jsonl (+ TensorBoard) in `workdir`, continuing after `resume_step` when
    resuming; writes the run's config.json beside it."""
    logger = metrics_log.MetricsLogger(workdir, tensorboard=cfg.tensorboard,
                                       resume_step=resume_step)
    (workdir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
    return logger
