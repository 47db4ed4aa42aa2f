"""How much of a critic-free sample's score is the KL penalty?

With `--kl_coef` > 0 the trainer subtracts kl_coef * sum_t k1_t (k1 = log pi - log ref, over
the response's tokens) from each sample's reward before GRPO / RLOO / max_at_k rank it in its
group. Where that term varies more across a group than the task's score does, the ranking,
and so the update, follows the KL's noise rather than the score. This samples a group of
solve programs from a trained policy as the trainer does (temperature 1), sums k1 against the
reference over each response, and sets the spread of the penalty beside the spread of the
valid scores in an evaluation's samples (`experiments/evaluate.py` JSON).

    python experiments/kl_share.py --policy_dir=runs/rl/policy --ref_dir=default \
        --task=heldout-pima-diabetes --task_dir=runs/rl_gain_b4/heldout_tasks \
        --scores=runs/rl_gain_b5/heldout-pima-diabetes/seed0/sft.json --kl_coef=0.02
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
from typing import Sequence

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def summed_k1(pol, ref, prompt_ids: Sequence[int], *, n: int, seed: int, max_new_tokens: int,
              eos_ids=(), pad_id: int = 0, batch: int = 8) -> tuple:
    """-> (sum over each response of log pi - log ref [n], the responses' tokens [n lists])
    for n samples of `pol` (temperature 1) from one prompt."""
    import jax.numpy as jnp

    from mle_rl import sampling
    from mle_rl.rl.ppo_update import policy_logprobs

    sums, responses = [], []
    for r in range(-(-n // batch)):
        g = min(batch, n - r * batch)
        out = sampling.generate(pol, [list(prompt_ids)] * g, max_new_tokens=max_new_tokens,
                                rng=seed * 1000 + r, temperature=1.0, eos_ids=eos_ids,
                                pad_id=pad_id)
        # One reference pass over the batch: prompt + response, right-padded (causal
        # attention keeps the padding from changing the positions before it).
        p, width = len(prompt_ids), out.tokens.shape[1]
        toks = np.full((g, p + width), pad_id, np.int32)
        toks[:, :p], toks[:, p:] = prompt_ids, out.tokens[:g]
        attn = (np.arange(p + width)[None, :] < p + out.lengths[:g, None]).astype(np.int32)
        lp_ref = np.asarray(policy_logprobs(ref, jnp.asarray(toks), jnp.asarray(attn), chunk=256))
        for i in range(g):
            k = int(out.lengths[i])
            sums.append(float(np.sum(out.logprobs[i, :k] - lp_ref[i, p - 1:p - 1 + k])))
            responses.append(out.tokens[i, :k].tolist())
    return np.array(sums), responses


def valid_solve_scores(path, task_id: str) -> list:
    """The valid scores of the solve samples of an evaluate.py JSON."""
    ev = json.loads(pathlib.Path(path).read_text())[task_id]
    return [s for s, m in zip(ev["scores"], ev["modes"]) if s is not None and m == "solve"]


def spread(sums: np.ndarray, lens: np.ndarray, scores: list, kl_coef: float) -> dict:
    """The penalty kl_coef * sum k1 across the samples against the valid scores' spread."""
    penalty_std = kl_coef * float(np.std(sums, ddof=1)) if len(sums) > 1 else None
    score_std = statistics.stdev(scores) if len(scores) > 1 else None
    return {"samples": len(sums), "response_tokens_mean": float(lens.mean()),
            "k1_per_token": float(sums.sum() / max(1, lens.sum())),
            "sum_k1_mean": float(sums.mean()),
            "sum_k1_std": float(np.std(sums, ddof=1)) if len(sums) > 1 else None,
            "kl_coef": kl_coef, "penalty_std": penalty_std, "valid_scores": len(scores),
            "valid_score_std": score_std,
            "penalty_std_over_score_std": (penalty_std / score_std
                                           if penalty_std is not None and score_std else None)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy_dir", required=True, help="the trained policy (HF checkpoint)")
    p.add_argument("--ref_dir", default="default", help="the reference (the SFT policy)")
    p.add_argument("--task", required=True)
    p.add_argument("--task_dir", default=None)
    p.add_argument("--scores", required=True, help="an evaluate.py JSON holding the task")
    p.add_argument("--kl_coef", type=float, default=0.02)
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_new_tokens", type=int, default=512)
    a = p.parse_args(argv)
    from mle_rl.agent import components
    from mle_rl.env import prompts as env_prompts, tasks as env_tasks
    from mle_rl.io import policy
    from mle_rl.warmstart.states import trained_prompt_budgets

    ref, tok, ref_dir = components.load_policy(a.ref_dir, log=lambda *_: None)
    pol, _, _ = components.load_policy(a.policy_dir, log=lambda *_: None)
    task = env_tasks.get_task(a.task, task_dir=a.task_dir)
    budget = (trained_prompt_budgets(ref_dir) or {}).get("solve", 768)
    count = lambda s: len(policy.encode_prompt(tok, s))  # noqa: E731
    ids = policy.encode_prompt(tok, env_prompts.solve_prompt(task, max_tokens=budget,
                                                             count_tokens=count))
    sums, responses = summed_k1(pol, ref, ids, n=a.n, seed=a.seed,
                                max_new_tokens=a.max_new_tokens,
                                eos_ids=policy.eos_ids(tok, pol.config),
                                pad_id=policy.pad_id(tok))
    lens = np.array([len(r) for r in responses])
    out = {"policy": a.policy_dir, "ref": str(ref_dir or a.ref_dir), "task": a.task,
           **spread(sums, lens, valid_solve_scores(a.scores, a.task), a.kl_coef)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
