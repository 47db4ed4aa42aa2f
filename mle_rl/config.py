"""Every flag of the trainer, defined in one place, and the frozen configs they become.

`define_flags()` registers the absl flags (called by the apps in `experiments/`);
`from_flags(flags)` turns parsed flags into a `RunConfig` and checks that the settings
agree, raising `ConfigError` with one line for a person. Nothing else in the library reads
`absl.flags.FLAGS`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from mle_rl.rl.learner import PPOConfig


class ConfigError(ValueError):
    """A bad or contradictory setting; the message is one line naming the flag(s)."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    policy_dir: Optional[str]          # HF dir (config.json + safetensors + tokenizer)
    preset: str = "tiny"               # used only with policy_dir=None (random init)
    dtype: str = "float32"
    instrumenter_dir: Optional[str] = None   # frozen LM for --instrument=lm


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    max_prompt_tokens: int = 768
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    sample_batch: int = 8


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    tasks: tuple = ("tabular-synth",)
    mlebench_dir: Optional[str] = None
    task_dir: Optional[str] = None     # user tasks: DIR/<id>/task.json + prepared/ (comma-separated)
    cache_dir: Optional[str] = None
    instrument: str = "ast"            # ast | lm | none
    reward: str = "rl4mle"             # rl4mle | mlagent
    self_improve: float = 0.5          # fraction of improve-previous-solution prompts
    prompt_source: str = "tasks"       # tasks | expert_states | mixed
    expert_fraction: float = 0.5       # with prompt_source=mixed
    timeout_s: Optional[float] = None  # override the tasks' own limits
    memory_mb: Optional[int] = None
    archive_size: int = 8


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    num_actors: int = 2
    max_in_flight: int = 8
    warm_pool: bool = True


@dataclasses.dataclass(frozen=True)
class BufferConfig:
    batch_size: int = 8
    max_staleness: int = 4
    capacity: int = 1024
    group_size: int = 1            # samples per prompt; a group is learned from whole or not


@dataclasses.dataclass(frozen=True)
class RunConfig:
    workdir: str
    model: ModelConfig
    sampling: SamplingConfig
    ppo: PPOConfig
    env: EnvConfig
    actors: ActorConfig
    buffer: BufferConfig
    max_steps: int = 100
    synchronous: bool = False
    max_wall_s: Optional[float] = None
    max_skipped_updates: int = 10      # stop after this many consecutive non-finite updates
    checkpoint_every: int = 10
    keep_checkpoints: int = 3
    resume: bool = False
    resume_step: Optional[int] = None
    seed: int = 0
    tensorboard: bool = True
    mesh_shape: Optional[tuple] = None
    fsdp: bool = False
    coordinator_address: Optional[str] = None
    num_processes: int = 1
    process_id: int = 0
    peer_timeout_s: float = 30.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Settings that shape the saved arrays (a critic or none, an adaptive β), the buffer's groups
# and batches (an exact resume takes the same batches) or the archive; the rest may change on
# resume. Checkpoints from before a setting existed saved its default.
RESUME_MUST_MATCH = ("model.*", "env.tasks", "ppo.critic", "ppo.advantage", "ppo.kl_ctrl",
                     "buffer.group_size", "buffer.batch_size")
_ADDED_LATER = {("ppo", "advantage"): "gae", ("ppo", "kl_ctrl"): "fixed",
                ("buffer", "group_size"): 1}


def with_added_defaults(saved: dict) -> dict:
    """A saved config (`RunConfig.to_dict()`) with the defaults of settings it predates."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in saved.items()}
    for (part, key), default in _ADDED_LATER.items():
        if isinstance(out.get(part), dict):
            out[part].setdefault(key, default)
    return out


def define_flags():
    """Registers the trainer's flags (idempotent)."""
    from absl import flags

    if "workdir" in flags.FLAGS:
        return
    d = flags
    # Run.
    d.DEFINE_string("workdir", None, "Directory for metrics, TensorBoard events and checkpoints.")
    d.DEFINE_integer("max_steps", 100, "Number of PPO updates.")
    d.DEFINE_bool("synchronous", False, "Baseline: sample a batch, wait for all of its actions, "
                  "update (instead of updating as soon as any batch_size actions are done).")
    d.DEFINE_float("max_wall_s", None, "Stop after this many seconds (checkpoint first).")
    d.DEFINE_integer("max_skipped_updates", 10, "Stop (with a checkpoint of the last good "
                     "parameters) after this many consecutive updates with a skipped, "
                     "non-finite step.")
    d.DEFINE_integer("checkpoint_every", 10, "Save a checkpoint every K updates.")
    d.DEFINE_integer("keep_checkpoints", 3, "How many checkpoints to keep.")
    d.DEFINE_bool("resume", False, "Continue from the latest checkpoint in --workdir.")
    d.DEFINE_integer("resume_step", None, "With --resume: this checkpoint step, not the latest.")
    d.DEFINE_integer("seed", 0, "Random seed.")
    d.DEFINE_bool("tensorboard", True, "Write TensorBoard events under WORKDIR/tb.")
    # Model.
    d.DEFINE_string("policy_dir", "default",
                    "HF checkpoint dir of the policy; 'default' = the cached CPU default "
                    "policy (built by the warm start when missing); 'random' = random init "
                    "of --model_preset with a byte-level tokenizer.")
    d.DEFINE_string("model_preset", "tiny", "Preset for --policy_dir=random.")
    d.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter/compute dtype.")
    d.DEFINE_string("instrumenter_dir", None,
                    "Frozen LM for --instrument=lm (default: the initial policy's checkpoint).")
    # Sampling.
    d.DEFINE_integer("max_prompt_tokens", 768, "Prompt budget in tokens.")
    d.DEFINE_integer("max_new_tokens", 512, "Response budget in tokens.")
    d.DEFINE_float("temperature", 1.0, "Sampling temperature.")
    d.DEFINE_float("top_p", 1.0, "Nucleus sampling.")
    d.DEFINE_integer("sample_batch", 8, "Prompts sampled together.")
    # PPO.
    d.DEFINE_float("actor_lr", 1e-5, "Policy learning rate.")
    d.DEFINE_float("critic_lr", 1e-5, "Critic learning rate.")
    d.DEFINE_float("max_grad_norm", 1.0, "Global-norm gradient clip.")
    d.DEFINE_float("clip_eps", 0.2, "PPO ratio clip (verl clip_ratio / clip_ratio_low).")
    d.DEFINE_float("clip_eps_high", None, "Upper ratio clip (verl clip_ratio_high; default: "
                   "--clip_eps).")
    d.DEFINE_float("clip_ratio_c", 3.0, "Dual-clip bound for negative advantages (verl "
                   "clip_ratio_c, > 1); 0 turns dual-clip off.")
    d.DEFINE_float("value_clip_eps", 0.2, "Value clip (verl critic.cliprange_value: 0.5).")
    d.DEFINE_float("weight_decay", 0.0, "AdamW weight decay (verl optim.weight_decay: 0.01).")
    d.DEFINE_enum("advantage", "gae", ["gae", "grpo", "rloo", "max_at_k"],
                  "Advantage estimator (verl adv_estimator; max_at_k: the leave-one-out "
                  "gradient of the expected best of --best_of_k samples, "
                  "rl/group_advantages.py); grpo / rloo / max_at_k are critic-free (no value "
                  "model) and need --group_size >= 2.")
    d.DEFINE_bool("grpo_std", True, "GRPO and max_at_k: divide by the group's std (verl "
                  "norm_adv_by_std_in_grpo; false = Dr. GRPO).")
    d.DEFINE_integer("best_of_k", 4, "--advantage=max_at_k: the k of the expected best of k "
                     "samples that the update raises (1 = RLOO; >= --group_size - 1 credits "
                     "only each group's best).")
    d.DEFINE_float("best_of_k_mean_coef", 0.0, "--advantage=max_at_k: the share λ of the "
                   "mean score in the objective, (1 - λ) E[best of k] + λ E[score]; with k "
                   "near --group_size the best-of-k term alone gives a failure the same "
                   "advantage as a valid program below the group's best "
                   "(rl/group_advantages.py).")
    d.DEFINE_float("best_of_k_valid_coef", 0.0, "--advantage=max_at_k: failures counted "
                   "separately: the best-of-k advantage plus μ times a validity term (RLOO of 1 = "
                   "graded submission), each divided by its own group std, so a failure pays "
                   "without shrinking the differences between valid programs "
                   "(rl/group_advantages.py).")
    d.DEFINE_enum("best_of_k_scale", "group", ["group", "scores"], "--advantage=max_at_k: "
                  "what the best-of-k term is divided by: each group's std of its advantages "
                  "(a win is a unit of credit whatever its margin), or one std for the update, "
                  "of its valid programs' scores (a win counts by its margin; "
                  "rl/group_advantages.py, experiments/family_tails.py --credit).")
    d.DEFINE_integer("group_size", 1, "Samples per prompt (verl rollout.n); the buffer "
                     "releases a prompt's samples to the learner only together.")
    d.DEFINE_float("kl_coef", 0.02, "KL(policy || reference) penalty in the reward (verl "
                   "kl_ctrl.kl_coef with use_kl_in_reward; 0 = none); the initial β with "
                   "--kl_ctrl=adaptive. With a critic-free --advantage the summed KL enters "
                   "each sample's score before its group is ranked and can outweigh the "
                   "score's own spread (experiments/kl_share.py measures it; rl/README.md).")
    d.DEFINE_enum("kl_kind", "k1", ["k1", "k2", "k3"], "KL estimator in the reward (verl "
                  "kl_penalty: kl, mse, low_var_kl).")
    d.DEFINE_enum("kl_ctrl", "fixed", ["fixed", "adaptive"], "KL coefficient controller "
                  "(verl kl_ctrl.type).")
    d.DEFINE_float("kl_target", 0.1, "Adaptive KL: target KL (verl kl_ctrl.target_kl).")
    d.DEFINE_float("kl_horizon", 10000.0, "Adaptive KL: horizon in samples (verl "
                   "kl_ctrl.horizon).")
    d.DEFINE_bool("use_kl_loss", False, "Add --kl_loss_coef * KL(policy || reference) to the "
                  "actor loss (verl use_kl_loss, as GRPO recipes).")
    d.DEFINE_float("kl_loss_coef", 0.001, "KL loss coefficient (verl kl_loss_coef).")
    d.DEFINE_enum("kl_loss_kind", "k3", ["k1", "k2", "k3"], "KL loss estimator (verl "
                  "kl_loss_type; k3 = low_var_kl).")
    d.DEFINE_float("ent_coef", 0.0, "Entropy bonus.")
    d.DEFINE_float("gamma", 1.0, "Discount.")
    d.DEFINE_float("lam", 0.95, "GAE lambda.")
    d.DEFINE_integer("ppo_epochs", 1, "Epochs over each batch.")
    d.DEFINE_integer("minibatches", 1, "Minibatches per epoch.")
    d.DEFINE_bool("duration_weights", True, "Weight each sequence's gradient by Δt / mean Δt.")
    d.DEFINE_float("duration_floor", 1.0, "Floor on Δt (s) so failed programs keep weight.")
    d.DEFINE_float("duration_cap", None, "Optional cap on Δt (s).")
    d.DEFINE_enum("critic", "separate", ["separate", "shared"], "Value head over its own trunk "
                  "copy or over the policy's trunk.")
    d.DEFINE_bool("remat", False, "Gradient checkpointing: the update recomputes each decoder "
                  "layer's activations in the backward pass (~1/3 more compute, activation "
                  "memory of one layer); see experiments/plan.py.")
    d.DEFINE_enum("reduction", "token_mean", ["token_mean", "sequence_mean",
                                              "seq_mean_token_sum", "seq_mean_token_sum_norm",
                                              "token_sum"],
                  "Loss aggregation (verl loss_agg_mode: token-mean, seq-mean-token-mean, "
                  "seq-mean-token-sum, seq-mean-token-sum-norm as verl 0.9: the mean over "
                  "sequences of each one's token sum / --loss_scale_factor).")
    d.DEFINE_float("loss_scale_factor", None, "Divisor of seq_mean_token_sum_norm (default: "
                   "--max_new_tokens).")
    # Environment.
    d.DEFINE_list("tasks", ["tabular-synth"], "Task ids (several = cross-task training).")
    d.DEFINE_string("mlebench_dir", None, "Directory of `mlebench prepare`d tasks.")
    define_task_dir_flag()
    d.DEFINE_string("cache_dir", None, "Cache for built-in tasks and the default policy.")
    d.DEFINE_enum("instrument", "ast", ["ast", "lm", "none"], "Instrumentation for partial credit.")
    d.DEFINE_enum("reward", "rl4mle", ["rl4mle", "mlagent"], "Reward scheme.")
    d.DEFINE_float("self_improve", 0.5, "Fraction of improve-previous-solution prompts.")
    d.DEFINE_enum("prompt_source", "tasks", ["tasks", "expert_states", "mixed"],
                  "Where prompts come from (expert_states = ML-Agent step-wise RL).")
    d.DEFINE_float("expert_fraction", 0.5, "Share of expert states with --prompt_source=mixed.")
    d.DEFINE_float("action_timeout_s", None, "Override each task's wall-time limit (s).")
    d.DEFINE_integer("action_memory_mb", None, "Override each task's memory limit (MB).")
    d.DEFINE_integer("archive_size", 8, "Valid solutions kept per task for improve prompts.")
    # Actors and buffer.
    d.DEFINE_integer("num_actors", 2, "Actor subprocesses executing actions.")
    d.DEFINE_integer("max_in_flight", 8, "Target number of actions in flight.")
    d.DEFINE_bool("warm_pool", True, "Serve actions from pre-warmed sandboxes.")
    define_sandbox_flag()
    d.DEFINE_integer("batch_size", 8, "Rollouts per PPO update.")
    d.DEFINE_integer("max_staleness", 4, "Drop rollouts older than this many policy versions.")
    d.DEFINE_integer("buffer_capacity", 1024, "Replay buffer capacity.")
    # Devices.
    d.DEFINE_list("mesh_shape", None, "data,model mesh shape (default: all devices on data).")
    d.DEFINE_bool("fsdp", False, "Also shard parameters over the data axis.")
    d.DEFINE_string("coordinator_address", None, "jax.distributed coordinator host:port.")
    d.DEFINE_integer("num_processes", 1, "Processes in a multi-host run.")
    d.DEFINE_integer("process_id", 0, "This process's index in a multi-host run.")
    d.DEFINE_float("peer_timeout_s", 30.0, "Multi-host: a process whose heartbeat has not "
                   "moved for this long is lost, and every other process stops (exit 5) "
                   "with one line naming it (runtime/peers.py).")


def define_task_dir_flag():
    """`--task_dir`, shared by every app that takes task ids (idempotent)."""
    from absl import flags

    if "task_dir" not in flags.FLAGS:
        flags.DEFINE_string("task_dir", None, "Your own tasks: DIR/<id>/task.json beside "
                            "DIR/<id>/prepared/{public,private} (several dirs: comma-separated).")


def define_sandbox_flag():
    """`--sandbox`, shared by every app that runs generated code (idempotent)."""
    from absl import flags

    if "sandbox" not in flags.FLAGS:
        flags.DEFINE_enum("sandbox", None, ["bwrap", "unsafe"],
                          "Isolation of generated code: bwrap (default; refuse to run without "
                          "it) or unsafe (explicit opt-in: no file-system sandbox, programs "
                          "still run as their own uid and cannot read the answers). Default: "
                          "$MLE_RL_SANDBOX, else bwrap.")


def require_sandbox(mode: Optional[str]) -> str:
    """Sets `--sandbox` for this process and its actors and checks that it works, before
    any program runs; raises ConfigError with the one line naming the fix."""
    from mle_rl.env import isolation

    try:
        if mode:
            isolation.set_mode(mode)
        return isolation.require()
    except isolation.SandboxUnavailable as e:
        raise ConfigError(str(e)) from None


def _check(cond: bool, message: str):
    if not cond:
        raise ConfigError(message)


def _check_learner_flags(f):
    """The estimator, grouping, clipping and KL flags agree with each other and the batch."""
    g = f.group_size
    _check(g >= 1, f"--group_size must be >= 1, got {g}.")
    _check(f.advantage == "gae" or g >= 2,
           f"--advantage={f.advantage} compares the samples of one prompt: set --group_size "
           f">= 2 (e.g. 4 or 8), got {g}.")
    _check(f.batch_size % (g * f.num_processes) == 0,
           f"--batch_size={f.batch_size} must hold whole groups on each process: make it a "
           f"multiple of --group_size={g} x --num_processes={f.num_processes}.")
    _check(f.max_in_flight >= g, f"--max_in_flight={f.max_in_flight} must be >= "
                                 f"--group_size={g} (a prompt's samples are sent together).")
    _check(f.clip_ratio_c == 0 or f.clip_ratio_c > 1,
           f"--clip_ratio_c must be > 1 (verl: 3) or 0 (off), got {f.clip_ratio_c}.")
    _check(f.kl_ctrl == "fixed" or (f.kl_coef > 0 and f.kl_target > 0 and f.kl_horizon > 0),
           "--kl_ctrl=adaptive needs --kl_coef > 0 (the initial coefficient), --kl_target > 0 "
           "and --kl_horizon > 0.")
    _check(f.best_of_k >= 1, f"--best_of_k must be >= 1, got {f.best_of_k}.")
    _check(0.0 <= f.best_of_k_mean_coef <= 1.0,
           f"--best_of_k_mean_coef must be in [0, 1], got {f.best_of_k_mean_coef}.")
    _check(0.0 <= f.best_of_k_valid_coef < float("inf"),
           f"--best_of_k_valid_coef must be finite and >= 0, got {f.best_of_k_valid_coef}.")
    _check(f.best_of_k_scale == "group" or f.grpo_std,
           "--best_of_k_scale=scores divides by a std; it contradicts --nogrpo_std.")
    _check(f.loss_scale_factor is None or f.loss_scale_factor > 0,
           "--loss_scale_factor must be > 0.")
    _check(f.max_skipped_updates >= 1, "--max_skipped_updates must be >= 1.")


def _learner_options(f) -> dict:
    """PPOConfig fields of the verl-parity and critic-free flags."""
    scale = f.loss_scale_factor
    if scale is None and f.reduction == "seq_mean_token_sum_norm":
        scale = float(f.max_new_tokens)     # a constant over the run, as Dr. GRPO asks
    return dict(clip_eps_high=f.clip_eps_high, clip_ratio_c=f.clip_ratio_c or None,
                value_clip_eps=f.value_clip_eps, weight_decay=f.weight_decay,
                advantage=f.advantage, grpo_std=f.grpo_std, best_of_k=f.best_of_k,
                best_of_k_mean_coef=f.best_of_k_mean_coef,
                best_of_k_valid_coef=f.best_of_k_valid_coef,
                best_of_k_scale=f.best_of_k_scale, kl_ctrl=f.kl_ctrl,
                kl_target=f.kl_target, kl_horizon=f.kl_horizon, use_kl_loss=f.use_kl_loss,
                kl_loss_coef=f.kl_loss_coef, kl_loss_kind=f.kl_loss_kind,
                loss_scale_factor=scale)


def from_flags(f) -> RunConfig:
    """Parsed absl flags -> RunConfig, with the cross-flag checks."""
    _check(f.workdir, "--workdir is required (where metrics and checkpoints go).")
    _check(f.max_steps >= 1, f"--max_steps must be >= 1, got {f.max_steps}.")
    _check(f.batch_size >= 1, f"--batch_size must be >= 1, got {f.batch_size}.")
    _check(f.batch_size % f.minibatches == 0,
           f"--batch_size={f.batch_size} is not divisible by --minibatches={f.minibatches}.")
    _check(0.0 <= f.self_improve <= 1.0, f"--self_improve must be in [0, 1], got {f.self_improve}.")
    _check(0.0 <= f.expert_fraction <= 1.0, "--expert_fraction must be in [0, 1].")
    _check(f.temperature > 0, f"--temperature must be > 0 for training (greedy decoding "
                              f"does not explore), got {f.temperature}.")
    _check(0 < f.top_p <= 1, f"--top_p must be in (0, 1], got {f.top_p}.")
    _check(f.num_actors >= 1, "--num_actors must be >= 1.")
    _check(f.max_in_flight >= 1, "--max_in_flight must be >= 1.")
    _check(f.max_staleness >= 0, "--max_staleness must be >= 0.")
    _check(f.buffer_capacity >= f.batch_size,
           f"--buffer_capacity={f.buffer_capacity} is smaller than --batch_size={f.batch_size}.")
    _check(f.duration_floor > 0, "--duration_floor must be > 0 (a failed program needs weight).")
    _check_learner_flags(f)
    _check(f.duration_cap is None or f.duration_cap >= f.duration_floor,
           "--duration_cap must be >= --duration_floor.")
    _check(f.actor_lr > 0 and f.critic_lr > 0, "--actor_lr and --critic_lr must be > 0.")
    _check(bool(f.tasks), "--tasks needs at least one task id.")
    _check(f.num_processes >= 1 and 0 <= f.process_id < f.num_processes,
           f"--process_id={f.process_id} must be in [0, --num_processes={f.num_processes}).")
    _check(f.peer_timeout_s > 0, "--peer_timeout_s must be > 0.")
    _check(f.num_processes == 1 or f.coordinator_address,
           "--num_processes > 1 needs --coordinator_address=host:port.")
    _check(f.batch_size % f.num_processes == 0,
           f"--batch_size={f.batch_size} is not divisible by --num_processes={f.num_processes} "
           "(each process contributes batch_size / num_processes rollouts to an update).")
    mesh_shape = None
    if f.mesh_shape:
        try:
            mesh_shape = tuple(int(x) for x in f.mesh_shape)
        except ValueError:
            raise ConfigError(f"--mesh_shape must be two integers like 2,2; got {f.mesh_shape}.")
        _check(len(mesh_shape) == 2, f"--mesh_shape needs two sizes (data,model), got {mesh_shape}.")
    if f.resume:
        _check(os.path.isdir(f.workdir), f"--resume: workdir {f.workdir} does not exist.")
    policy_dir = None if f.policy_dir == "random" else f.policy_dir
    return RunConfig(
        workdir=f.workdir,
        model=ModelConfig(policy_dir=policy_dir, preset=f.model_preset, dtype=f.dtype,
                          instrumenter_dir=f.instrumenter_dir),
        sampling=SamplingConfig(max_prompt_tokens=f.max_prompt_tokens,
                                max_new_tokens=f.max_new_tokens, temperature=f.temperature,
                                top_p=f.top_p, sample_batch=f.sample_batch),
        ppo=PPOConfig(actor_lr=f.actor_lr, critic_lr=f.critic_lr, max_grad_norm=f.max_grad_norm,
                      clip_eps=f.clip_eps, kl_coef=f.kl_coef, kl_kind=f.kl_kind,
                      ent_coef=f.ent_coef, gamma=f.gamma, lam=f.lam, epochs=f.ppo_epochs,
                      minibatches=f.minibatches, duration_weights=f.duration_weights,
                      duration_floor=f.duration_floor, duration_cap=f.duration_cap,
                      critic=f.critic, reduction=f.reduction, remat=f.remat,
                      **_learner_options(f)),
        env=EnvConfig(tasks=tuple(f.tasks), mlebench_dir=f.mlebench_dir, task_dir=f.task_dir,
                      cache_dir=f.cache_dir,
                      instrument=f.instrument, reward=f.reward, self_improve=f.self_improve,
                      prompt_source=f.prompt_source, expert_fraction=f.expert_fraction,
                      timeout_s=f.action_timeout_s, memory_mb=f.action_memory_mb,
                      archive_size=f.archive_size),
        actors=ActorConfig(num_actors=f.num_actors, max_in_flight=f.max_in_flight,
                           warm_pool=f.warm_pool),
        buffer=BufferConfig(batch_size=f.batch_size, max_staleness=f.max_staleness,
                            capacity=f.buffer_capacity, group_size=f.group_size),
        max_steps=f.max_steps, synchronous=f.synchronous, max_wall_s=f.max_wall_s,
        max_skipped_updates=f.max_skipped_updates,
        checkpoint_every=f.checkpoint_every,
        keep_checkpoints=f.keep_checkpoints, resume=f.resume or f.resume_step is not None,
        resume_step=f.resume_step, seed=f.seed,
        tensorboard=f.tensorboard, mesh_shape=mesh_shape, fsdp=f.fsdp,
        coordinator_address=f.coordinator_address, num_processes=f.num_processes,
        process_id=f.process_id, peer_timeout_s=f.peer_timeout_s)
