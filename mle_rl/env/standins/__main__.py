"""python -m mle_rl.env.standins --out DIR [--ids a,b] [--seed 0]: writes the stand-ins."""

from __future__ import annotations

import argparse
import time

from mle_rl.env import standins


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Write small stand-ins of the MLE-bench "
                                             "competitions in their prepared layouts.")
    ap.add_argument("--out", required=True, help="directory to write <id>/prepared/ into")
    ap.add_argument("--ids", default="", help="comma-separated competition ids (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    ids = [i.strip() for i in args.ids.split(",") if i.strip()] or None
    t0 = time.time()
    done = standins.build(args.out, ids=ids, seed=args.seed, log=print)
    print(f"wrote {len(done)} competitions under {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
