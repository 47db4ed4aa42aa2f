"""The warm-start pipeline: expert corpus -> tokenizer -> SFT -> an HF policy directory.

    ensure_default_policy()          -> <cache>/policies/default/ (built when missing)
    build(out_dir, WarmStartSettings(...), log=print)

The policy directory holds the model (`hf.save`), its tokenizer, `states.jsonl` (the
step-wise RL states pool), `warmstart.json` (settings, figures, a marker hash) and
`sft_loss.png`. A directory is reused only when its marker matches the hash of the
pipeline's source and settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import random
import shutil
import time
from typing import Callable, Optional

from mle_rl.env import prompts, tasks
from mle_rl.warmstart import corpus, generic, lm_instrument, sft, sft_data, tokenizer as tok_lib

MARKER = "warmstart.json"
WARMSTART_FORMAT = 1     # the layout of MARKER that this version writes and reads (states.py)
EXPECTED_MINUTES = 25


@dataclasses.dataclass(frozen=True)
class WarmStartSettings:
    """task_ids: tasks the corpus is built from (minus `holdout_tasks`, kept for
    evaluating cross-task generalization)."""

    task_ids: tuple = tasks.BUILTIN_TASKS
    holdout_tasks: tuple = ()
    n_per_task: int = 24
    generated: int = 120           # procedural tasks (env/procedural) in the corpus
    per_generated: int = 2
    text_share: float = 0.25       # of the procedural tasks, those with a free-text column
    image_share: float = 0.15      # ... and those of pictures in an image competition's layout
    builtin_repeat: int = 3        # SFT sees the built-in tasks' solve examples this often
    vocab_size: int = 16384
    budgets: sft_data.Budgets = sft_data.Budgets()
    sft: sft.SFTConfig = sft.SFTConfig()
    held_out_fraction: float = 0.05
    improve_max: int = 200         # improve examples are long; cap how many go into SFT
    instrument_max: int = 150
    seed: int = 0

    @property
    def train_tasks(self) -> tuple:
        return tuple(t for t in self.task_ids if t not in self.holdout_tasks)

    def to_json(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


BUILD_MODULES = ("action_pool", "generic", "generic_header", "generic_code", "generic_text_code",
                 "generic_image_code", "programs", "programs_span", "corpus", "lm_instrument",
                 "tokenizer", "sft_data", "sft")


def source_hash(settings: WarmStartSettings) -> str:
    """sha256 over the settings and the sources that decide what a build produces (the
    warm-start modules in BUILD_MODULES and the environment's prompts)."""
    here = pathlib.Path(__file__).parent
    files = [here / f"{m}.py" for m in BUILD_MODULES] + [pathlib.Path(prompts.__file__)]
    d = hashlib.sha256(json.dumps(settings.to_json(), sort_keys=True).encode())
    for f in files:
        d.update(f.name.encode() + f.read_bytes())
    return d.hexdigest()[:16]


def is_current(path, settings: WarmStartSettings) -> bool:
    try:
        m = json.loads((pathlib.Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return m.get("hash") == source_hash(settings) and (pathlib.Path(path) / "config.json").is_file()


def tokenizer_texts(steps) -> list[str]:
    """What the BPE is trained on, weighted as the SFT data will be: per corpus program, its
    task's solve prompt (full, approximate count) and the improve instructions, its response
    (plan and fenced code) and its code as an improve prompt shows it, its output, numbered
    listing and instrumentation answer; plus every description of the corpus's tasks."""
    full = {}
    for tid in sorted({s["task_id"] for s in steps}):
        t = tasks.get_task(tid)
        full[tid] = prompts.solve_prompt(t, max_tokens=1 << 20)
    out = list(full.values())
    for s in steps:
        code = s["code"].rstrip() + "\n"
        out += [full.get(s["task_id"], ""), prompts.IMPROVE_RULES, lm_instrument.HEADER,
                sft_data.response_text(s["plan"], s["code"]),      # as a response
                f"Plan: {s['plan']}\n\n```python\n{code}```\n\n",   # as in an improve prompt
                s["output"], lm_instrument.numbered(s["code"]),
                lm_instrument.reference_answer(s["code"])]
    return out


def build(out_dir, settings: WarmStartSettings = WarmStartSettings(), *,
          corpus_dir=None, log: Callable = print, pool=None) -> dict:
    """Runs the whole pipeline into `out_dir` (written to a temporary sibling, then renamed).
    Returns the summary that is also written to `out_dir/warmstart.json`."""
    import jax
    from mle_rl.models import config as model_config, hf, qwen2
    from mle_rl.models import sharding as shd

    out_dir = pathlib.Path(out_dir)
    t_start = time.time()
    corpus_dir = pathlib.Path(corpus_dir or out_dir.parent / (out_dir.name + "-corpus"))
    cs = corpus.CorpusSettings(task_ids=settings.train_tasks, n_per_task=settings.n_per_task,
                               generated=settings.generated,
                               per_generated=settings.per_generated,
                               text_share=settings.text_share,
                               image_share=settings.image_share, seed=settings.seed)
    log(f"[1/4] expert corpus ({len(cs.task_ids)} tasks x {cs.n_per_task} programs, "
        f"{cs.generated} procedural tasks x {cs.per_generated})")
    if pool is None:
        from mle_rl.env.warm_pool import WarmPool
        with WarmPool(size=cs.workers) as warm:
            cstats = corpus.build(corpus_dir, cs, log=log, pool=warm)
    else:
        cstats = corpus.build(corpus_dir, cs, log=log, pool=pool)
    steps = corpus.read_jsonl(corpus_dir / corpus.STEPS_FILE)
    t_corpus = time.time() - t_start
    log(f"      {cstats['ok']}/{cstats['programs']} programs valid "
        f"({cstats['success_rate']:.0%}) in {t_corpus:.0f} s")

    log(f"[2/4] tokenizer (byte-level BPE, vocab {settings.vocab_size})")
    t0 = time.time()
    texts = tokenizer_texts(steps)              # the corpus's tasks: nothing of held-out ones
    tok = tok_lib.train(texts, vocab_size=settings.vocab_size)
    code_texts = [s["code"] for s in steps]
    bpt_all = tok_lib.bytes_per_token(tok, texts)
    bpt_code = tok_lib.bytes_per_token(tok, code_texts)
    log(f"      {len(tok)} tokens; {bpt_all:.2f} bytes/token overall, {bpt_code:.2f} on code "
        f"({time.time() - t0:.0f} s)")

    log("[3/4] supervised fine-tuning")
    ex = corpus.load_examples(corpus_dir)
    rng = random.Random(settings.seed)
    named = set(settings.train_tasks)         # few programs each among many generated ones
    # A cap takes examples from every task, the named tasks' improve examples first, and
    # instrumentation examples of the image/text/span programs first (the task-generic
    # programs differ little).
    first = {"improve": lambda e: e["task_id"] not in named,
             "instrument": lambda e: generic.parse(e["code"]) is not None}
    for kind, cap in (("improve", settings.improve_max), ("instrument", settings.instrument_max)):
        rng.shuffle(ex[kind])
        ex[kind].sort(key=first[kind])
        ex[kind] = ex[kind][:cap]
    train_ex, eval_ex = sft_data.split_examples(ex, settings.held_out_fraction, settings.seed)
    train_ex["solve"] += [e for e in train_ex["solve"]
                          if e["task_id"] in named] * (settings.builtin_repeat - 1)
    train_rows, tstats = sft_data.tokenize(sft_data.texts(train_ex, tok, settings.budgets),
                                           tok, settings.budgets)
    eval_rows, estats = sft_data.tokenize(sft_data.texts(eval_ex, tok, settings.budgets),
                                          tok, settings.budgets)
    rows = train_rows + eval_rows
    tstats = {k: tstats[k] + estats[k] for k in tstats}
    kinds = {k: sum(1 for r in rows if r[0] == k) for k in ("solve", "improve", "instrument")}
    log(f"      {len(train_rows)} train / {len(eval_rows)} held-out sequences {kinds}; "
        f"{tstats['prompt_tokens'] + tstats['response_tokens']} tokens "
        f"({tstats['response_tokens']} response), {tstats['dropped']} over budget dropped")
    cfg = model_config.tiny(len(tok))
    model = qwen2.init_model(cfg, seed=settings.seed)
    mesh = shd.make_mesh()
    hist = sft.train(model, train_rows, eval_rows, settings.sft,
                     tok.convert_tokens_to_ids("<|endoftext|>"), mesh=mesh, log=log)

    log("[4/4] saving the policy")
    tmp = out_dir.with_name(out_dir.name + ".building")
    if tmp.exists():
        shutil.rmtree(tmp)
    hf.save(model, tmp, tokenizer=tok)
    shutil.copyfile(corpus_dir / corpus.STATES_FILE, tmp / corpus.STATES_FILE)
    sft.plot_curve(hist, tmp / "sft_loss.png")
    n_params = sum(x.size for x in jax.tree.leaves(
        __import__("flax").nnx.state(model, __import__("flax").nnx.Param)))
    summary = {
        "format": WARMSTART_FORMAT, "hash": source_hash(settings),
        "settings": settings.to_json(),
        "build_seconds": round(time.time() - t_start, 1),
        "corpus_seconds": round(t_corpus, 1),
        "corpus": {k: v for k, v in cstats.items() if k != "key"},
        "tokenizer": {"vocab": len(tok), "bytes_per_token": round(bpt_all, 3),
                      "bytes_per_token_code": round(bpt_code, 3)},
        "sft": {"sequences_train": len(train_rows), "sequences_held_out": len(eval_rows),
                "kinds": kinds, **tstats, "steps": hist["step"][-1] if hist["step"] else 0,
                "stopped_by": hist.get("stopped_by"),
                "epochs": round(hist["epochs"], 2), "seconds": round(hist["seconds_total"], 1),
                "tokens_seen": hist["tokens"], "first_loss": hist["train_loss"][:1],
                "final_train_loss": hist["train_loss"][-1:], "held_out": hist["eval"],
                "tokens_per_s": round(hist["tokens"] / max(hist["seconds_total"], 1e-9), 1)},
        "model": {"preset": "tiny", "params": int(n_params)},
    }
    (tmp / "sft_history.json").write_text(json.dumps(hist))
    (tmp / MARKER).write_text(json.dumps(summary, indent=1))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    log(f"done in {summary['build_seconds']:.0f} s: {out_dir}")
    return summary


def default_policy_dir(cache_dir=None) -> pathlib.Path:
    return tasks.cache_dir(cache_dir) / "policies" / "default"


def ensure_default_policy(cache_dir=None, log: Callable = print,
                          settings: Optional[WarmStartSettings] = None) -> pathlib.Path:
    """The cached default CPU policy, built first when missing or stale."""
    settings = settings or WarmStartSettings()
    path = default_policy_dir(cache_dir)
    if is_current(path, settings):
        return path
    log(f"No current default policy under {path}: building it from nothing with the "
        f"warm-start pipeline (expert corpus, tokenizer, SFT); this takes about "
        f"{EXPECTED_MINUTES} minutes on 2 CPU cores and is done once.")
    build(path, settings, log=log)
    return path
