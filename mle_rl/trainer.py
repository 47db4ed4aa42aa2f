"""The asynchronous trainer: prompts -> sample -> dispatch -> buffer -> update -> checkpoint -> log.

One loop on the learner's host:
  * keep `max_in_flight` actions in flight: sample responses with the current policy (on
    the learner's devices) and hand them to the actor pool;
  * collect whatever actions finished (in any order) into the replay buffer, and valid
    solutions into the per-task archive (for self-improvement prompts);
  * as soon as `batch_size` fresh rollouts are in the buffer, run one PPO update — the
    learner never waits for the slowest action; PPO ratios use the behaviour log-probs
    recorded at sampling time; rollouts older than `max_staleness` versions are dropped;
  * every `checkpoint_every` updates, and on SIGINT/SIGTERM, save a checkpoint.

Multi-host (`--num_processes` > 1, see `distributed`): every process runs this loop with its
own actors, buffer and archive, and samples on its own devices. The learner's mesh spans all
processes, so updates are collective: at each turn of the loop the processes exchange two
flags (enough rollouts for their share of the batch; asked to stop) and update only when
every one of them is ready, each feeding `batch_size / num_processes` rollouts; one stop
stops all. Metrics are reduced over processes; process 0 alone writes the logs, the
summary and the exported policy; checkpoints are written by all (orbax), with every
process's host state gathered into one checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import time
from collections import Counter
from typing import Optional

import jax
import numpy as np
from flax import nnx

from mle_rl import buffer as rbuf
from mle_rl import distributed
from mle_rl import checkpoint as ckpt
from mle_rl import metrics_log, policy_io, sampling
from mle_rl.actors import ActionDone, ActionRequest, ActorPool
from mle_rl.config import ConfigError, RunConfig
from mle_rl.env import families, tasks as env_tasks
from mle_rl.env.instrument import new_nonce
from mle_rl.models import hf
from mle_rl.models import sharding as shd
from mle_rl.prompt_sources import Archive, MixedSource, Prompt, TaskPromptSource, signed
from mle_rl.rl.learner import Learner


class ExpertPrompts:
    """ML-Agent's step-wise RL: prompts from states of expert trajectories (task + history
    up to step t), drawn from the warm start's states pool."""

    def __init__(self, source):
        self.source = source

    def sample(self, rng) -> Prompt:
        task_id, text, meta = self.source.sample(rng)
        return Prompt(task_id, text, "expert", prev_score=meta.get("prev_score"),
                      prev_code=meta.get("prev_code"))


def make_prompt_source(cfg: RunConfig, tasks: dict, archive: Archive, count_tokens,
                       policy_dir: Optional[pathlib.Path]):
    own = TaskPromptSource(tasks, archive, self_improve=cfg.env.self_improve,
                           max_tokens=cfg.sampling.max_prompt_tokens, count_tokens=count_tokens)
    if cfg.env.prompt_source == "tasks":
        return own
    if policy_dir is None:
        raise ConfigError(f"--prompt_source={cfg.env.prompt_source} needs a policy directory "
                          f"with a states pool (states.jsonl), e.g. --policy_dir=default.")
    from mle_rl.warmstart.states import ExpertStatesSource
    try:
        expert = ExpertPrompts(ExpertStatesSource(
            policy_dir, task_ids=tuple(tasks), count_tokens=count_tokens,
            solve_tokens=cfg.sampling.max_prompt_tokens,
            improve_tokens=cfg.sampling.max_prompt_tokens,
            mlebench_dir=cfg.env.mlebench_dir, cache_dir=cfg.env.cache_dir))
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(str(e)) from None
    if cfg.env.prompt_source == "expert_states":
        return expert
    return MixedSource(own, expert, cfg.env.expert_fraction)


class Trainer:
    """`work_fn` (a "module:function" run by each actor; default: the real environment)
    and `work_kwargs` replace what actors do, for benchmarks with synthetic actions."""

    def __init__(self, cfg: RunConfig, log=print, *, work_fn: Optional[str] = None,
                 work_kwargs: Optional[dict] = None):
        self.cfg, self.log = cfg, log
        self.work_fn, self.extra_work_kwargs = work_fn, dict(work_kwargs or {})
        self.workdir = pathlib.Path(cfg.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mesh = shd.make_mesh(cfg.mesh_shape)
        # Tasks first: an unknown id fails before any model is loaded.
        self.tasks = {}
        for tid in cfg.env.tasks:
            try:
                self.tasks[tid] = env_tasks.get_task(tid, mlebench_dir=cfg.env.mlebench_dir,
                                                     cache_dir=cfg.env.cache_dir)
            except env_tasks.UnknownTask as e:
                raise ConfigError(str(e)) from None
        model, self.tokenizer, self.policy_dir = policy_io.load_policy(
            cfg.model.policy_dir, preset=cfg.model.preset, dtype=cfg.model.dtype,
            cache_dir=cfg.env.cache_dir, seed=cfg.seed, log=log)
        self.model_config = model.config
        self.instrumenter = self._instrumenter_spec()       # fails early when unusable
        self.eos_ids = policy_io.eos_ids(self.tokenizer, model.config)
        self.pad_id = policy_io.pad_id(self.tokenizer)
        self.learner = Learner(model, cfg.ppo, mesh=self.mesh, fsdp=cfg.fsdp, seed=cfg.seed)
        del model
        # Each host samples for its own actors on its own devices (no cross-host lockstep).
        self.sample_mesh = distributed.host_local_mesh(
            model=min(self.mesh.shape[shd.MODEL], jax.local_device_count()))
        self._refresh_sampler()
        self.archive = Archive(cfg.env.archive_size)
        count = lambda s: len(policy_io.encode_prompt(self.tokenizer, s))  # noqa: E731
        self.source = make_prompt_source(cfg, self.tasks, self.archive, count, self.policy_dir)
        self.buffer = rbuf.ReplayBuffer(cfg.buffer.max_staleness, cfg.buffer.capacity)
        self.nproc, self.proc = jax.process_count(), jax.process_index()
        self.local_batch = cfg.buffer.batch_size // self.nproc
        self.rng = np.random.default_rng([cfg.seed, self.proc])
        self.sample_key = jax.random.key_data(
            jax.random.fold_in(jax.random.key(cfg.seed + 1), self.proc))
        self.counters = Counter()
        self.best = {}                         # task id -> best raw score
        self.family_counts = Counter()
        self.pending = {}                      # request id -> what the learner needs later
        ckpt.quiet_orbax_logging()
        self.checkpointer = ckpt.Checkpointer(self.workdir / "checkpoints",
                                              keep=cfg.keep_checkpoints)
        self._stop = None            # why this process wants to stop (signal, wall time)
        self._stopped = False        # every process has agreed to stop
        if cfg.resume:
            self._restore()
        self.metrics = None
        if self.proc == 0:
            self.metrics = metrics_log.MetricsLogger(
                self.workdir, tensorboard=cfg.tensorboard,
                resume_step=self.step if cfg.resume else None)
            (self.workdir / "config.json").write_text(
                json.dumps(cfg.to_dict(), indent=2, default=str))

    # ------------------------------------------------------------------ state
    @property
    def step(self) -> int:
        return int(self.learner.state.step)

    def _extra(self) -> dict:
        return {
            "archive": self.archive.state_dict(),
            "counters": dict(self.counters),
            "best": self.best,
            "families": dict(self.family_counts),
            "host_rng": self.rng.bit_generator.state,
            "sample_key": np.asarray(self.sample_key),
            "buffer": self.buffer.state_dict(),
            "config": self.cfg.to_dict(),
        }

    def save_checkpoint(self, force: bool = False):
        """On every process (a collective when multi-process: each one's host state is
        gathered so that process 0's checkpoint holds all of them)."""
        if not self.checkpointer.should_save(self.step, force):
            return
        extra = self._extra()
        if self.nproc > 1:
            extra = {"hosts": distributed.allgather_objects(extra), "config": extra["config"]}
        self.checkpointer.save(self.step, self.learner.state, extra, force=force)

    def _restore(self):
        """Loads checkpoint `--resume_step` (default: the latest). Resuming below the latest,
        the later checkpoints are moved aside (one warning line says where) once the restore
        has succeeded, so this run writes those steps anew and a later `--resume` finds
        them; `MetricsLogger(resume_step=...)` likewise drops the metrics after the step."""
        latest = self.cfg.resume_step
        if latest is None:
            latest = self.checkpointer.latest_step()
        if latest is None:
            raise ckpt.CheckpointError(
                f"--resume: no checkpoint in {self.workdir / 'checkpoints'}; run without "
                f"--resume to start fresh.")
        state, extra = self.checkpointer.restore(latest, abstract_state=self.learner.state)
        hosts = extra.get("hosts")
        if (len(hosts) if hosts is not None else 1) != self.nproc:
            raise ckpt.CheckpointError(
                f"checkpoint {latest} in {self.workdir / 'checkpoints'} was written by "
                f"{len(hosts) if hosts is not None else 1} process(es); resume it with the same "
                f"--num_processes (now {self.nproc}).")
        if hosts is not None:
            extra = {**hosts[self.proc], "config": extra["config"]}
        # What shapes the saved arrays and the archive must match; the rest may change.
        ckpt.check_compatible(extra.get("config", {}), self.cfg.to_dict(),
                              directory=self.workdir / "checkpoints", step=latest,
                              keys=("model.*", "env.tasks", "ppo.critic"))
        self.learner.state = state
        self._refresh_sampler()
        self.archive.load_state_dict(extra["archive"])
        self.counters = Counter(extra["counters"])
        self.best = dict(extra["best"])
        self.family_counts = Counter(extra["families"])
        self.rng.bit_generator.state = extra["host_rng"]
        self.sample_key = np.asarray(extra["sample_key"], np.uint32)
        self.buffer.load_state_dict(extra["buffer"])
        moved, where = self.checkpointer.discard_after(latest)
        distributed.barrier("resume_discard_after")     # every process sees the same steps
        if moved and self.proc == 0:
            self.log(f"[resume] warning: resuming from checkpoint {latest}, below the latest "
                     f"{moved[-1]}: moved checkpoint(s) {moved} to {where} (this run writes "
                     f"them anew; metrics.jsonl continues after step {latest})")
        self.log(f"[resume] continuing at update {self.step} from {self.workdir}")

    # ------------------------------------------------------------------ acting
    def _refresh_sampler(self):
        """The sampler's copy of the current policy on `sample_mesh` (an all-gather when the
        learner's mesh spans hosts: call it right after each update, on every host)."""
        params = distributed.to_host_local(self.learner.state.policy, self.sample_mesh)
        self.sampler_policy = nnx.merge(self.learner.policy_graph, params)

    def _sample(self, pool: ActorPool, n: int):
        """Sample `n` responses with the current policy and submit them as actions."""
        prompts = [self.source.sample(self.rng) for _ in range(n)]
        ids = [policy_io.encode_prompt(self.tokenizer, p.text) for p in prompts]
        key, sub = jax.random.split(jax.random.wrap_key_data(self.sample_key))
        self.sample_key = jax.random.key_data(key)
        out = sampling.generate(
            self.sampler_policy, ids, max_new_tokens=self.cfg.sampling.max_new_tokens,
            rng=sub, temperature=self.cfg.sampling.temperature, top_p=self.cfg.sampling.top_p,
            eos_ids=self.eos_ids, pad_id=self.pad_id, mesh=self.sample_mesh)
        version = self.step
        for i, (p, prompt_ids) in enumerate(zip(prompts, ids)):
            n_tok = int(out.lengths[i])
            resp = out.tokens[i, :n_tok]
            rid = self.counters["next_request_id"]
            self.counters["next_request_id"] += 1
            self.pending[rid] = dict(prompt=p, prompt_tokens=np.asarray(prompt_ids, np.int32),
                                     response_tokens=resp, logprobs=out.logprobs[i, :n_tok],
                                     version=version)
            pool.submit(ActionRequest(request_id=rid, task_id=p.task_id,
                                      response=policy_io.decode_response(self.tokenizer, resp),
                                      policy_version=version, nonce=new_nonce(),
                                      prev_score=p.prev_score, prev_code=p.prev_code))
        self.counters["sampled"] += n

    def _collect(self, done: ActionDone):
        info = self.pending.pop(done.request.request_id, None)
        if info is None:         # a request from before a restart
            return
        r, p = done.result, info["prompt"]
        task = self.tasks[p.task_id]
        self.counters["actions_done"] += 1
        self.counters[f"status_{r.status}"] += 1
        fam = families.primary_family(r.code)
        self.family_counts[fam] += 1
        if r.status == "ok" and r.score is not None:
            self.archive.add(task, plan=r.plan, code=r.code, output=r.stdout_tail, score=r.score)
            prev = self.best.get(p.task_id)
            if prev is None or signed(r.score, task.is_lower_better) > signed(prev, task.is_lower_better):
                self.best[p.task_id] = float(r.score)
        self.buffer.add(rbuf.Rollout(
            request_id=done.request.request_id, task_id=p.task_id,
            prompt_tokens=info["prompt_tokens"], response_tokens=info["response_tokens"],
            logprobs=info["logprobs"], policy_version=info["version"], reward=r.reward,
            duration_s=r.duration_s, status=r.status, score=r.score, prompt_kind=p.kind,
            meta={"family": fam, "hits": len(r.hits), "lm": r.instrumented_by}))

    # ------------------------------------------------------------------ learning
    def _update(self, t_start: float, busy: dict) -> dict:
        batch_rollouts = self.buffer.take(self.local_batch, self.step)
        # Pad to the batch's own lengths rounded up to powers of two (the same on every
        # process), not to the budgets: a few compiled shapes, far fewer padded tokens.
        longest = distributed.allgather_host(np.array([
            max(len(x.prompt_tokens) for x in batch_rollouts),
            max(len(x.response_tokens) for x in batch_rollouts)])).max(0)
        batch = rbuf.collate(batch_rollouts,
                             min(sampling.bucket(longest[0], 16),
                                 self.cfg.sampling.max_prompt_tokens),
                             min(sampling.bucket(longest[1], 16),
                                 self.cfg.sampling.max_new_tokens),
                             self.pad_id)
        t0 = time.monotonic()
        m = self.learner.update(batch)
        self._refresh_sampler()
        busy["learner"] += time.monotonic() - t0
        m.update(step=self.step, **self._batch_metrics(batch_rollouts, t_start, busy))
        if f"best_score/{self.cfg.env.tasks[0]}" in m:
            m["best_score"] = m[f"best_score/{self.cfg.env.tasks[0]}"]
        return m

    def _batch_metrics(self, rollouts: list, t_start: float, busy: dict) -> dict:
        """Metrics of one update's batch: sums over this process's rollouts, reduced over
        all processes (one small all-gather)."""
        wall = time.monotonic() - t_start
        fams = sorted(families.FAMILIES) + ["ensemble", "none"]
        meta = [x.meta for x in rollouts]
        sums = {                                     # summed over processes
            "n": len(rollouts), "reward": sum(x.reward for x in rollouts),
            "ok": sum(x.status == "ok" for x in rollouts),
            "duration": sum(x.duration_s for x in rollouts),
            "staleness": sum(self.step - 1 - x.policy_version for x in rollouts),
            "improve": sum(x.prompt_kind == "improve" for x in rollouts),
            "hits": sum(m.get("hits", 0) for m in meta),
            "lm": sum(m.get("lm") == "lm" for m in meta),
            "lm_fallback": sum(m.get("lm") == "lm_fallback" for m in meta),
            "dropped_stale": self.buffer.counters["dropped_stale"],
            "actions_done": self.counters["actions_done"],
            **{f"family/{f}": sum(m.get("family", "none") == f for m in meta) for f in fams}}
        means = {"learner_busy_frac": busy["learner"] / max(wall, 1e-9),   # averaged
                 "sampler_busy_frac": busy["sampler"] / max(wall, 1e-9)}
        best = [signed(self.best[t], self.tasks[t].is_lower_better) if t in self.best
                else -np.inf for t in self.cfg.env.tasks]               # max over processes
        rows = distributed.allgather_host(
            np.array([*sums.values(), *means.values(), *best], np.float64))
        k, j = len(sums), len(sums) + len(means)
        tot = dict(zip(sums, rows[:, :k].sum(0)))
        n = tot["n"]
        out = dict(reward_mean=float(tot["reward"] / n), valid_frac=float(tot["ok"] / n),
                   duration_mean_s=float(tot["duration"] / n),
                   staleness_mean=float(tot["staleness"] / n),
                   improve_frac=float(tot["improve"] / n), hits_mean=float(tot["hits"] / n),
                   dropped_stale=int(tot["dropped_stale"]),
                   actions_done=int(tot["actions_done"]),
                   **{k_: float(v) for k_, v in zip(means, rows[:, k:j].mean(0))},
                   wall_s=wall)
        lm_runs = tot["lm"] + tot["lm_fallback"]    # programs the frozen LM instrumented
        if lm_runs:
            out["lm_instrument_accept_frac"] = float(tot["lm"] / lm_runs)
        out.update({k_: float(v / n) for k_, v in tot.items() if k_.startswith("family/") and v})
        for tid, b in zip(self.cfg.env.tasks, rows[:, j:].max(0)):
            if np.isfinite(b):
                out[f"best_score/{tid}"] = float(signed(b, self.tasks[tid].is_lower_better))
        return out

    def _agree(self, ready: bool) -> bool:
        """Whether every process is ready to update; sets `_stopped` when any process was
        asked to stop (then all leave the loop together). A collective when multi-process:
        every process calls it once per turn of the loop."""
        flags_ = np.array([[ready, self._stop is not None]], np.int32)
        if self.nproc > 1:
            flags_ = distributed.allgather_host(flags_[0])
        if flags_[:, 1].any():
            self._stopped = True
            self._stop = self._stop or "stop_on_another_process"
        return bool(flags_[:, 0].all()) and not self._stopped

    def _instrumenter_spec(self) -> str:
        """'ast' | 'none' | 'lm:<dir>': the frozen LM is the instrumenter checkpoint given, or
        the policy as loaded at the start (never the policy being trained)."""
        if self.cfg.env.instrument != "lm":
            return self.cfg.env.instrument
        frozen = self.cfg.model.instrumenter_dir or self.policy_dir
        if frozen is None:
            raise ConfigError("--instrument=lm needs a frozen model: pass --instrumenter_dir "
                              "or a --policy_dir checkpoint (not 'random').")
        return f"lm:{frozen}"

    def _sync_round(self, pool: ActorPool, busy: Counter):
        """The synchronous baseline: sample a whole batch, wait for every action of it."""
        b = self.cfg.buffer.batch_size
        t0 = time.monotonic()
        for i in range(0, b, self.cfg.sampling.sample_batch):
            self._sample(pool, min(self.cfg.sampling.sample_batch, b - i))
        busy["sampler"] += time.monotonic() - t0
        while pool.in_flight() and self._stop is None:
            for done in pool.poll(timeout=0.2):
                self._collect(done)

    def _act(self, pool: ActorPool, busy: Counter):
        """One turn of acting: a whole synchronous round, or (asynchronous) top up the
        actions in flight and collect whatever finished."""
        cfg = self.cfg
        if cfg.synchronous:
            self._sync_round(pool, busy)
            return
        room = cfg.actors.max_in_flight - pool.in_flight()
        if room > 0:
            t0 = time.monotonic()
            self._sample(pool, min(room, cfg.sampling.sample_batch))
            busy["sampler"] += time.monotonic() - t0
        for done in pool.poll(timeout=0.0 if room > 0 else 0.2):
            self._collect(done)

    # ------------------------------------------------------------------ main loop
    def _on_signal(self, signum, frame):
        if self._stop is not None:                      # second signal: stop right away
            raise KeyboardInterrupt
        self._stop = signal.Signals(signum).name
        self.log(f"[signal] {self._stop}: finishing this step, saving a checkpoint, exiting")

    def run(self) -> dict:
        cfg = self.cfg
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        timeouts = {tid: (cfg.env.timeout_s or t.timeout_s) for tid, t in self.tasks.items()}
        work = dict(mlebench_dir=cfg.env.mlebench_dir, cache_dir=cfg.env.cache_dir,
                    instrumenter=self.instrumenter, reward_scheme=cfg.env.reward,
                    timeout_s=cfg.env.timeout_s, memory_mb=cfg.env.memory_mb,
                    warm_pool={"size": 1} if cfg.actors.warm_pool else None)
        progress = metrics_log.Progress(cfg.max_steps, start_step=self.step,
                                        max_wall_s=cfg.max_wall_s)
        busy = Counter()
        t_start = time.monotonic()
        work.update(self.extra_work_kwargs)
        pool_kw = {"work_fn": self.work_fn} if self.work_fn else {}
        pool = ActorPool(cfg.actors.num_actors, work_kwargs=work,
                         action_timeout_s=lambda r: timeouts[r.task_id], **pool_kw)
        try:
            while self.step < cfg.max_steps and not self._stopped:
                if cfg.max_wall_s and time.monotonic() - t_start > cfg.max_wall_s:
                    self._stop = self._stop or "max_wall_s"
                if self._stop is None:      # a stopping process only joins `_agree` below
                    self._act(pool, busy)
                if self._agree(self.buffer.ready(self.local_batch, self.step)):
                    m = self._update(t_start, busy)
                    if self.metrics is not None:
                        self.metrics.log(self.step, m)
                        progress.update(self.step, m)
                    if self.step % cfg.checkpoint_every == 0:
                        self.save_checkpoint()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            pool.close()
            self.save_checkpoint(force=True)
            self.checkpointer.wait()
            if self.metrics is not None:
                self.metrics.close()
        return self._finish(time.monotonic() - t_start)

    def _finish(self, wall: float) -> dict:
        if self.proc != 0:
            return {"updates": self.step, "process": self.proc, "stopped_by": self._stop}
        # The sampler's copy is the whole current policy on this host's devices.
        hf.save(self.sampler_policy, self.workdir / "policy", tokenizer=self._hf_tokenizer())
        metrics_file = self.workdir / "metrics.jsonl"
        if metrics_file.exists():
            metrics_log.plot_reward_curve(metrics_file, self.workdir / "reward_curve.png")
        summary = {
            "updates": self.step, "wall_s": round(wall, 1), "stopped_by": self._stop or "max_steps",
            "best": self.best, "actions_done": self.counters["actions_done"],
            "families": dict(self.family_counts),
            "statuses": {k[7:]: v for k, v in self.counters.items() if k.startswith("status_")},
        }
        tmp = self.workdir / f"summary.json.tmp-{os.getpid()}"    # whole, even under kill -9
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, self.workdir / "summary.json")
        if metrics_file.exists():
            self.log(metrics_log.summarize(metrics_file))
        return summary

    def _hf_tokenizer(self):
        return None if isinstance(self.tokenizer, policy_io.ByteTokenizer) else self.tokenizer
