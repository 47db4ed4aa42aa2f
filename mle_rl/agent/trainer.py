"""The asynchronous trainer: prompts -> sample -> dispatch -> buffer -> update -> checkpoint -> log.

One loop on the learner's host (`Trainer.run`), each turn a few named steps:
  * `_act`: keep `max_in_flight` actions in flight: sample responses with the current
    policy (on the learner's devices; `group_size` of each prompt) for the actor pool;
  * `_collect`: whatever actions finished (in any order) go into the replay buffer, and
    valid solutions into the per-task archive (for self-improvement prompts);
  * `_update`: as soon as `batch_size` fresh rollouts are in the buffer, one PPO update —
    the learner never waits for the slowest action; PPO ratios use the behaviour
    log-probs recorded at sampling time; rollouts older than `max_staleness` versions are
    dropped; a non-finite update is skipped, too many in a row stop the run (`SkipGuard`);
  * `_log`, `_checkpoint`: a metrics row per update; a checkpoint every
    `checkpoint_every` updates, and on SIGINT/SIGTERM.
The parts (policy, tokenizer, learner, sampler mesh, prompt sources, actor pool,
checkpointer, logger) are built in `components.py`.

Multi-host (`--num_processes` > 1, see `runtime/distributed.py`): every process runs this
loop with its own actors, buffer and archive, and samples on its own devices. The learner's
mesh spans all processes, so updates are collective: at each turn of the loop the processes
exchange two flags (enough rollouts for their share of the batch; asked to stop) and update
only when every one of them is ready, each feeding `batch_size / num_processes` rollouts;
one stop stops all. Metrics are reduced over processes; process 0 alone writes the logs,
the summary and the exported policy; checkpoints are written by all (orbax), with every
process's host state gathered into one checkpoint.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import time
from collections import Counter
from typing import Optional

import jax
import numpy as np
from flax import nnx

from mle_rl import sampling
from mle_rl.agent import buffer as rbuf
from mle_rl.agent import components
from mle_rl.agent.actors import ActionDone, ActionRequest, ActorPool
from mle_rl.agent.batch_metrics import batch_metrics
from mle_rl.agent.host_state import HostState
from mle_rl.agent.prompt_sources import Archive, draw_prompts, signed
from mle_rl.agent.update_guard import SkipGuard, TrainingDiverged
from mle_rl.runtime.compile_cache import CompileLog
from mle_rl.runtime import allocator
from mle_rl.runtime.footprint import footprint, rss_now
from mle_rl.config import RunConfig
from mle_rl.env import families
from mle_rl.env.rewards import graded
from mle_rl.env.instrument import new_nonce
from mle_rl.io import disk
from mle_rl.io import metrics_log, policy
from mle_rl.models import hf
from mle_rl.models import sharding as shd
from mle_rl.rl.learner import Learner
from mle_rl.runtime import distributed, peers


class Trainer(HostState):
    """`work_fn` (a "module:function" run by each actor; default: the real environment)
    and `work_kwargs` replace what actors do, for benchmarks with synthetic actions."""

    def __init__(self, cfg: RunConfig, log=print, *, work_fn: Optional[str] = None,
                 work_kwargs: Optional[dict] = None):
        self.cfg, self.log = cfg, log
        self.compiles = CompileLog.get()   # per update: compilations since the last one
        self.compiles.take()
        self.work_fn, self.extra_work_kwargs = work_fn, dict(work_kwargs or {})
        self.workdir = pathlib.Path(cfg.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mesh = shd.make_mesh(cfg.mesh_shape)
        # RSS at each stage of the start ("start": the backend up, nothing loaded or compiled)
        # and the peak of the first sampling call: a run's peaks are read against them
        # (benchmarks/bench_real_shapes.py against experiments/plan.py).
        self.memory_stages = {"start": rss_now()}
        self.tasks = components.load_tasks(cfg)   # first: a bad id fails before any model loads
        model, self.tokenizer, self.policy_dir = components.load_policy(
            cfg.model.policy_dir, preset=cfg.model.preset, dtype=cfg.model.dtype,
            cache_dir=cfg.env.cache_dir, seed=cfg.seed, log=log)
        self.model_config = model.config
        self.memory_stages["policy_loaded"] = rss_now()
        self.instrumenter = components.instrumenter_spec(cfg, self.policy_dir)  # fails early
        self.eos_ids = policy.eos_ids(self.tokenizer, model.config)
        self.pad_id = policy.pad_id(self.tokenizer)
        self.learner = Learner(model, cfg.ppo, mesh=self.mesh, fsdp=cfg.fsdp, seed=cfg.seed,
                               take_model=True)     # the weights are not held twice
        del model
        self.sample_mesh = components.sample_mesh(self.mesh)
        self._refresh_sampler()
        allocator.trim_cache()       # the build's transient copies, when they are large
        self._phase, self._released_mb = None, 0.0     # _enter_phase
        self.memory_stages["learner_built"] = rss_now()
        self.archive = Archive(cfg.env.archive_size)
        self.source = components.make_prompt_source(cfg, self.tasks, self.archive,
                                                    self._count_tokens, self.policy_dir)
        self.buffer = rbuf.ReplayBuffer(cfg.buffer.max_staleness, cfg.buffer.capacity,
                                        cfg.buffer.group_size)
        self.nproc, self.proc = jax.process_count(), jax.process_index()
        self.local_batch = cfg.buffer.batch_size // self.nproc
        self.rng = np.random.default_rng([cfg.seed, self.proc])
        self.sample_key = jax.random.key_data(
            jax.random.fold_in(jax.random.key(cfg.seed + 1), self.proc))
        self.counters = Counter()
        self.best = {}                         # task id -> best raw score
        self.family_counts = Counter()
        self.pending = {}                      # request id -> what the learner needs later
        self.checkpointer = components.make_checkpointer(cfg, self.workdir)
        self._stop = None            # why this process wants to stop (signal, wall time)
        self._stopped = False        # every process has agreed to stop
        if cfg.resume:
            self._restore()
        self.guard = SkipGuard(cfg.max_skipped_updates, self.counters, log)
        self.metrics = None
        if self.proc == 0:
            self.metrics = components.make_logger(cfg, self.workdir,
                                                  self.step if cfg.resume else None)

    @property
    def step(self) -> int:
        return int(self.learner.state.step)

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict:
        """Until `max_steps` updates or a stop (a signal, `max_wall_s`, another process):
        act and collect every turn; update, log and checkpoint whenever a batch is ready."""
        handlers = self._catch_signals()
        self._progress = metrics_log.Progress(self.cfg.max_steps, start_step=self.step,
                                              max_wall_s=self.cfg.max_wall_s)
        self._busy, self._t_start = Counter(), time.monotonic()
        self._done_at_start = self.counters["actions_done"]      # resumed runs count theirs
        pool = components.make_actor_pool(self.cfg, self.tasks, self.instrumenter,
                                          work_fn=self.work_fn,
                                          extra_work_kwargs=self.extra_work_kwargs)
        save = True
        try:
            while self.step < self.cfg.max_steps and not self._stopped:
                self._check_wall_clock()
                if self._stop is None:      # a stopping process only joins `_agree` below
                    sampled = self._act(pool)
                    self._collect(pool, sampled)
                if self._agree(self.buffer.ready(self.local_batch, self.step)):
                    metrics = self._update()
                    self._log(metrics)
                    self._checkpoint()
        except disk.DiskFullError:
            save = False              # no last checkpoint: the latest whole one stays
            raise
        except Exception as e:
            if peers.is_peer_failure(e):
                save = False          # a dead peer: no collective checkpoint can complete
            raise
        finally:
            self._shut_down(pool, handlers, save=save)
        try:
            summary = self._finish(time.monotonic() - self._t_start)
        except OSError as e:
            if not disk.is_disk_full(e) or isinstance(e, disk.DiskFullError):
                raise
            raise disk.disk_full(self.workdir, "the exported policy, reward curve or summary",
                                 f"checkpoint {self.step} is whole.") from e
        if self.guard.message:
            raise TrainingDiverged(self.guard.message)
        return summary

    # ------------------------------------------------------------------ act
    def _act(self, pool: ActorPool) -> bool:
        """Sample responses with the current policy and submit them as actions: a whole
        batch (the synchronous baseline), or one sampling batch while fewer than
        `max_in_flight` actions are in flight. Returns whether it sampled."""
        cfg, g = self.cfg, self.cfg.buffer.group_size     # whole groups of g samples
        if cfg.synchronous:
            n = cfg.buffer.batch_size
        else:
            room = cfg.actors.max_in_flight - pool.in_flight()
            if room < g:
                return False
            n = max(g, min(room, cfg.sampling.sample_batch) // g * g)
        t0 = time.monotonic()
        prompts, groups = draw_prompts(self.source, self.rng, n, g, self.counters)
        for i in range(0, n, cfg.sampling.sample_batch):
            j = i + cfg.sampling.sample_batch
            self._sample(pool, prompts[i:j], groups[i:j])
        self._busy["sampler"] += time.monotonic() - t0
        return True

    def _enter_phase(self, phase: str) -> int:
        """At each change of phase (sample, update, checkpoint), tcmalloc's cached free pages
        past a share of the memory go back to the kernel (the phase left behind would
        otherwise stay resident while this one faults in pages of its own:
        runtime/allocator.py). Trimming at the start of the next phase, not at the end of
        the last, also catches the temporaries XLA frees just after an update returns.
        -> bytes returned."""
        if phase == self._phase:
            return 0
        self._phase = phase
        released = allocator.trim_cache()
        self._released_mb += released / 2**20
        return released

    def _sample(self, pool: ActorPool, prompts: list, groups: list):
        """Sample a response to each prompt with the current policy; submit them as actions."""
        self._enter_phase("sample")
        n = len(prompts)
        ids = [policy.encode_prompt(self.tokenizer, p.text) for p in prompts]
        key, sub = jax.random.split(jax.random.wrap_key_data(self.sample_key))
        self.sample_key = jax.random.key_data(key)
        out = sampling.generate(
            self.sampler_policy, ids, max_new_tokens=self.cfg.sampling.max_new_tokens,
            rng=sub, temperature=self.cfg.sampling.temperature, top_p=self.cfg.sampling.top_p,
            eos_ids=self.eos_ids, pad_id=self.pad_id, mesh=self.sample_mesh)
        if "first_sample" not in self.memory_stages:
            self.memory_stages["first_sample"] = rss_now()
        peers.fault_point("sample", self.step + 1)
        version = self.step
        for i, (p, prompt_ids, group) in enumerate(zip(prompts, ids, groups)):
            n_tok = int(out.lengths[i])
            resp = out.tokens[i, :n_tok]
            rid = self.counters["next_request_id"]
            self.counters["next_request_id"] += 1
            self.pending[rid] = dict(prompt=p, prompt_tokens=np.asarray(prompt_ids, np.int32),
                                     response_tokens=resp, logprobs=out.logprobs[i, :n_tok],
                                     version=version, group=group)
            pool.submit(ActionRequest(request_id=rid, task_id=p.task_id,
                                      response=policy.decode_response(self.tokenizer, resp),
                                      policy_version=version, nonce=new_nonce(),
                                      prev_score=p.prev_score, prev_code=p.prev_code))
        self.counters["sampled"] += n

    def _count_tokens(self, text: str) -> int:
        return len(policy.encode_prompt(self.tokenizer, text))

    def _refresh_sampler(self):
        """The sampler's copy of the current policy on `sample_mesh` (an all-gather when the
        learner's mesh spans hosts: call it right after each update, on every host)."""
        params = distributed.to_host_local(self.learner.state.policy, self.sample_mesh)
        self.sampler_policy = nnx.merge(self.learner.policy_graph, params)

    # ------------------------------------------------------------------ collect
    def _collect(self, pool: ActorPool, sampled: bool):
        """Finished actions into the buffer: in a synchronous round every action of it (until
        a stop); otherwise whatever has finished (waiting up to 0.2 s if nothing was sampled)."""
        if self.cfg.synchronous:
            while pool.in_flight() and self._stop is None:
                for done in pool.poll(timeout=0.2):
                    self._record(done)
            return
        for done in pool.poll(timeout=0.0 if sampled else 0.2):
            self._record(done)

    def _record(self, done: ActionDone):
        """One finished action: counts, its family, the archive and best score (valid
        solutions), and a `Rollout` in the buffer."""
        info = self.pending.pop(done.request.request_id, None)
        if info is None:         # a request from before a restart
            return
        r, p = done.result, info["prompt"]
        task = self.tasks[p.task_id]
        self.counters["actions_done"] += 1
        self.counters[f"status_{r.status}"] += 1
        fam = families.primary_family(r.code)
        self.family_counts[fam] += 1
        if graded(r.status, r.score):
            self.archive.add(task, plan=r.plan, code=r.code, output=r.stdout_tail, score=r.score)
            prev = self.best.get(p.task_id)
            if prev is None or signed(r.score, task.is_lower_better) > signed(prev, task.is_lower_better):
                self.best[p.task_id] = float(r.score)
        self.buffer.add(rbuf.Rollout(
            request_id=done.request.request_id, task_id=p.task_id,
            prompt_tokens=info["prompt_tokens"], response_tokens=info["response_tokens"],
            logprobs=info["logprobs"], policy_version=info["version"], reward=r.reward,
            duration_s=r.duration_s, status=r.status, score=r.score, prompt_kind=p.kind,
            meta={"family": fam, "hits": len(r.hits), "lm": r.instrumented_by},
            group_id=info.get("group")))

    # ------------------------------------------------------------------ update
    def _update(self) -> dict:
        """One PPO update on `local_batch` rollouts from the buffer; -> its metrics row."""
        batch_rollouts = self.buffer.take(self.local_batch, self.step)
        # Pad to the batch's own lengths rounded up to powers of two (the same on every
        # process), not to the budgets: a few compiled shapes, far fewer padded tokens.
        longest = distributed.allgather_host(np.array([
            max(len(x.prompt_tokens) for x in batch_rollouts),
            max(len(x.response_tokens) for x in batch_rollouts)])).max(0)
        width = (min(sampling.bucket(longest[0], 16), self.cfg.sampling.max_prompt_tokens),
                 min(sampling.bucket(longest[1], 16), self.cfg.sampling.max_new_tokens))
        batch = rbuf.collate(batch_rollouts, *width, self.pad_id)
        # Group ids unique over processes (each local batch holds at most local_batch groups).
        batch["group_ids"] = batch["group_ids"] + self.proc * self.local_batch
        t0 = time.monotonic()
        peers.fault_point("update", self.step + 1)
        self._enter_phase("update")
        m = self.learner.update(batch)
        self._refresh_sampler()
        self._busy["learner"] += time.monotonic() - t0
        m.update(step=self.step, padded_prompt_tokens=int(width[0]),
                 padded_response_tokens=int(width[1]), **{"mem/released_mb": self._released_mb},
                 **batch_metrics(
            batch_rollouts, step=self.step, tasks=self.tasks, task_ids=self.cfg.env.tasks,
            best=self.best, dropped_stale=self.buffer.counters["dropped_stale"],
            actions_done=self.counters["actions_done"], busy=self._busy,
            wall=time.monotonic() - self._t_start,
            per_seq=getattr(self.learner, "last_per_seq", None)))
        first = self.cfg.env.tasks[0]
        for key in ("best_score", "score_mean_valid"):     # the first task's, unprefixed
            if f"{key}/{first}" in m:
                m[key] = m[f"{key}/{first}"]
        self._released_mb = 0.0         # mem/released_mb: trimmed since the last row
        m["compiles"], compile_s = self.compiles.take()
        m["compile_s"] = round(compile_s, 3)
        m["dropped_groups"] = self.buffer.counters["dropped_groups"]
        m.update(footprint())            # this process's memory: mem/* (runtime/footprint.py)
        if m["dropped_groups"] > self.counters["dropped_groups_logged"]:
            self.log(f"[update {self.step}] dropped {m['dropped_groups']} stale prompt "
                     f"group(s) so far (older than --max_staleness={self.cfg.buffer.max_staleness})")
            self.counters["dropped_groups_logged"] = m["dropped_groups"]
        if self.guard.after_update(self.step, m, self.workdir / "checkpoints"):
            self._stop = self._stop or "nonfinite_updates"
        return m

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

    # ------------------------------------------------------------------ log, checkpoint
    def _log(self, metrics: dict):
        if self.metrics is not None:
            self.metrics.log(self.step, metrics)
            self._progress.update(self.step, metrics)

    def _checkpoint(self):
        if self.step % self.cfg.checkpoint_every == 0:
            self.save_checkpoint()

    # ------------------------------------------------------------------ stop, finish
    def _catch_signals(self) -> dict:
        """SIGINT/SIGTERM set `_stop` (the loop finishes its step, checkpoints, exits)."""
        return {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def _on_signal(self, signum, frame):
        if self._stop is not None:                      # second signal: stop right away
            raise KeyboardInterrupt
        self._stop = signal.Signals(signum).name
        self.log(f"[signal] {self._stop}: finishing this step, saving a checkpoint, exiting")

    def _check_wall_clock(self):
        if self.cfg.max_wall_s and time.monotonic() - self._t_start > self.cfg.max_wall_s:
            self._stop = self._stop or "max_wall_s"

    def _shut_down(self, pool: ActorPool, handlers: dict, save: bool = True):
        """However the loop ended: the old signal handlers back, the actors stopped, a last
        checkpoint written (and waited for; not after a full disk), the logs closed."""
        for s, h in handlers.items():
            signal.signal(s, h)
        pool.close()
        if save:
            self.save_checkpoint(force=True)
            self.checkpointer.wait()
        if self.metrics is not None:
            self.metrics.close()

    def _finish(self, wall: float) -> dict:
        """Process 0: the trained policy (HF format), the reward curve, summary.json."""
        if self.proc != 0:
            return {"updates": self.step, "process": self.proc, "stopped_by": self._stop}
        # The sampler's copy is the whole current policy on this host's devices.
        hf.save(self.sampler_policy, self.workdir / "policy", tokenizer=self._hf_tokenizer())
        self._copy_lineage(self.workdir / "policy")
        metrics_file = self.workdir / "metrics.jsonl"
        if metrics_file.exists():
            metrics_log.plot_reward_curve(metrics_file, self.workdir / "reward_curve.png")
        summary = {
            "updates": self.step, "wall_s": round(wall, 1), "stopped_by": self._stop or "max_steps",
            "best": self.best, "actions_done": self.counters["actions_done"],
            "programs_per_hour": round((self.counters["actions_done"] - self._done_at_start)
                                       * 3600.0 / max(wall, 1e-9), 1),
            "families": dict(self.family_counts),
            "statuses": {k[7:]: v for k, v in self.counters.items() if k.startswith("status_")},
            "compiles": self.compiles.total[0], "compile_s": round(self.compiles.total[1], 2),
            "memory_stages_mb": self.memory_stages,
        }
        tmp = self.workdir / f"summary.json.tmp-{os.getpid()}"    # whole, even under kill -9
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, self.workdir / "summary.json")
        if metrics_file.exists():
            self.log(metrics_log.summarize(metrics_file))
        return summary

    def _copy_lineage(self, dest: pathlib.Path) -> None:
        """A warm-start policy's `warmstart.json` (the prompt lengths it was fine-tuned on,
        which the trainer kept to, so evaluation fits its prompts the same way) and its
        states pool go along with the trained policy."""
        if self.policy_dir is None:
            return
        for name in ("warmstart.json", "states.jsonl"):
            src = pathlib.Path(self.policy_dir) / name
            if src.is_file():
                shutil.copyfile(src, dest / name)

    def _hf_tokenizer(self):
        return None if isinstance(self.tokenizer, policy.ByteTokenizer) else self.tokenizer
