"""Memory of the learner's update and the sampler, phase by phase, under tcmalloc.

For each phase of `--plan` (S: one sampling call of 2 x (P + R) tokens with the learner's
policy, U: one PPO update on a fixed batch of that shape; `--trim_before=SU` hands tcmalloc's
free pages back to the kernel before those phases), prints the peak of what tcmalloc has
allocated and of the RSS (read every 5 ms), and the page heap after it: its size, its free
resident pages and the pages handed back. This is how the second update's growth in
benchmarks/results/real_shapes.md was told apart from the arrays (it is the allocator).

    python benchmarks/alloc_phases.py --policy=runs/real_shapes/diag2/policy_bfloat16 \
        --plan=S,S,U,S,S,U,S,U
"""
import argparse
import ctypes
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mle_rl.runtime import allocator  # noqa: E402

allocator.reexec_with_tcmalloc()
import numpy as np  # noqa: E402
ap = argparse.ArgumentParser()
ap.add_argument("--policy", required=True, help="an HF policy directory (the 0.5B stand-in)")
ap.add_argument("--dtype", default="bfloat16")
ap.add_argument("--P", type=int, default=1024); ap.add_argument("--R", type=int, default=128)
ap.add_argument("--plan", default="S,S,U,S,S,U,S,U")
ap.add_argument("--trim_before", default="")   # phases (S, U) preceded by a trim
args = ap.parse_args()
import jax  # noqa: E402
from flax import nnx  # noqa: E402

from mle_rl import sampling  # noqa: E402
from mle_rl.agent import components  # noqa: E402
from mle_rl.rl.learner import Learner, PPOConfig  # noqa: E402
from mle_rl.runtime.footprint import tcmalloc_property  # noqa: E402

if tcmalloc_property("generic.current_allocated_bytes") is None:
    sys.exit("alloc_phases: needs tcmalloc (launch/setup.sh installs libtcmalloc-minimal4)")
G = 2**30
tc = lambda n: (tcmalloc_property(n) or 0) / G
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / G
def stats():
    return dict(inuse=round(tc("generic.current_allocated_bytes"), 2), rss=round(rss(), 2),
                free=round(tc("tcmalloc.pageheap_free_bytes"), 2),
                unmapped=round(tc("tcmalloc.pageheap_unmapped_bytes"), 2),
                heap=round(tc("generic.heap_size"), 2))
model, tok, _ = components.load_policy(args.policy, dtype=args.dtype)
learner = Learner(model, PPOConfig(critic="shared", minibatches=2, remat=True), take_model=True)
del model
print("built", json.dumps(stats()), flush=True)
B, L = 2, args.P + args.R
rng = np.random.default_rng(0)
batch = dict(tokens=rng.integers(0, 1000, (B, L)).astype(np.int32),
             attention_mask=np.ones((B, L), np.int32),
             response_mask=np.concatenate([np.zeros((B, args.P), np.int32),
                                           np.ones((B, args.R), np.int32)], 1),
             behaviour_logprobs=np.full((B, L), -2.0, np.float32),
             rewards=np.array([1.0, -1.0], np.float32), durations=np.ones(B, np.float32))
def watched(fn):
    stop = threading.Event(); pk = [0.0, 0.0]
    def w():
        while not stop.is_set():
            pk[0] = max(pk[0], tc("generic.current_allocated_bytes")); pk[1] = max(pk[1], rss())
            time.sleep(0.005)
    th = threading.Thread(target=w); th.start(); t0 = time.time()
    fn(); stop.set(); th.join()
    return dict(s=round(time.time() - t0, 1), inuse_peak=round(pk[0], 2), rss_peak=round(pk[1], 2))
def S(i):
    sampler = nnx.merge(learner.policy_graph, learner.state.policy)
    sampling.generate(sampler, [list(range(5, 5 + args.P - 8))] * 2,
                      max_new_tokens=args.R, rng=jax.random.key(i), temperature=0.7,
                      top_p=1.0, eos_ids=[], pad_id=0)
def U(i):
    learner.update(batch)
for i, ph in enumerate(args.plan.split(",")):
    if ph in args.trim_before:
        ctypes.CDLL(None).MallocExtension_ReleaseFreeMemory()
    r = watched(lambda: (S if ph == "S" else U)(i))
    print(ph, json.dumps(r), "after", json.dumps(stats()), flush=True)
