"""The warm-start report (markdown) and the closing note printed at the end of a build."""

from __future__ import annotations

import time
from typing import Sequence


def _fmt(x, nd=4):
    return "-" if x is None else (f"{x:.{nd}g}" if isinstance(x, float) else str(x))


def total_minutes(summary: dict) -> float:
    """Build time from nothing: a run that reused the corpus cache adds the corpus's own
    measured execution time."""
    c = summary["corpus"]
    extra = c["seconds"] if c.get("cached") else 0.0
    return (summary["build_seconds"] + extra) / 60


def _counts(r: dict) -> str:
    """Families by how often the samples chose them, e.g. "hist_gb 9, mlp 6"."""
    fc = r.get("family_counts") or {f: "?" for f in r["families"]}
    return ", ".join(f"{f} {c}" for f, c in sorted(fc.items(), key=lambda x: -x[1]
                                                     if isinstance(x[1], int) else 0))


def closing_note(summary: dict, results: Sequence[dict]) -> str:
    c, t, s = summary["corpus"], summary["tokenizer"], summary["sft"]
    lines = [
        f"Warm start built in {total_minutes(summary):.1f} min "
        f"(corpus {c['seconds']:.0f} s{' (cached from an earlier run)' if c.get('cached') else ''}, "
        f"SFT {s['seconds']:.0f} s).",
        f"Corpus: {c['programs']} programs run, {c['ok']} valid ({c['success_rate']:.0%}); "
        f"{s['sequences_train']} train / {s['sequences_held_out']} held-out sequences "
        f"{s['kinds']}, {s['prompt_tokens'] + s['response_tokens']} tokens "
        f"({s['response_tokens']} response).",
        f"Tokenizer: vocab {t['vocab']}, {t['bytes_per_token']:.2f} bytes/token "
        f"({t['bytes_per_token_code']:.2f} on code).",
        f"SFT: {s['steps']} steps, {s['epochs']} epochs, {s['tokens_per_s']:.0f} tokens/s; "
        f"train loss {_fmt(s['first_loss'][0] if s['first_loss'] else None, 3)} -> "
        f"{_fmt(s['final_train_loss'][0] if s['final_train_loss'] else None, 3)}; held-out "
        + " -> ".join(f"{v:.3f}" for _, v in s["held_out"][:1] + s["held_out"][-1:]) + ".",
    ]
    for r in results:
        lines.append(f"{r['task']}: {r['valid']}/{r['samples']} valid, {r['n_families']} "
                     f"families, >=3 prints {r['hits_ge3']}/{r['valid_with_hits']} "
                     f"({r['lm_hits_ge3']}/{r['lm_accepted_valid']} LM-accepted), "
                     f"LM instrumenter {r['lm_instrumenter']}, best {_fmt(r['best_score'])}")
    return "\n".join(lines)


def markdown(summary: dict, results: Sequence[dict], settings) -> str:
    c, t, s = summary["corpus"], summary["tokenizer"], summary["sft"]
    out = ["# Warm start: the default CPU policy from nothing", "",
           "Produced by `launch/warm_start.sh` (`experiments/warm_start.py "
           "--flagfile=experiments/warm_start.flags`) on 2 shared CPU cores.", "",
           f"## Build of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
           f"* total {total_minutes(summary):.1f} min: corpus execution {c['seconds']:.0f} s"
           f"{' (measured when the corpus was built; this run reused its cache)' if c.get('cached') else ''}"
           f", SFT {s['seconds']:.0f} s, the rest (tokenizer, compilation, saving) "
           f"{summary['build_seconds'] - summary['corpus_seconds'] - s['seconds']:.0f} s",
           f"* model: `tiny({t['vocab']})`, {summary['model']['params'] / 1e6:.1f} M parameters",
           f"* corpus: {c['programs']} programs executed, {c['ok']} valid "
           f"({c['success_rate']:.0%}), statuses {c['statuses']}; examples {c['examples']}; "
           f"{c.get('states', '-')} states for step-wise RL",
           f"* tokenizer: byte-level BPE, vocab {t['vocab']}, {t['bytes_per_token']:.2f} "
           f"bytes/token over the corpus and descriptions, {t['bytes_per_token_code']:.2f} "
           "on programs",
           f"* SFT: {s['sequences_train']} train / {s['sequences_held_out']} held-out sequences "
           f"{s['kinds']}; {s['prompt_tokens'] + s['response_tokens']} tokens "
           f"({s['response_tokens']} response, the only ones in the loss); {s['steps']} steps, "
           f"{s['epochs']} epochs, {s['tokens_per_s']:.0f} tokens/s",
           "* held-out loss per response token: "
           + ", ".join(f"step {k}: {v:.3f}" for k, v in s["held_out"]), "",
           "![SFT loss](warm_start_sft_loss.png)", "", "## Corpus per task", "",
           "| task | programs | valid | families | best score |", "|---|---|---|---|---|"]
    gen = {tid: d for tid, d in c["per_task"].items() if tid.startswith("gen-")}
    for tid, d in c["per_task"].items():
        if tid not in gen:
            out.append(f"| {tid} | {d['programs']} | {d['ok']} | {len(d['families'])} | "
                       f"{_fmt(d['best'])} |")
    if gen:
        fams = set().union(*(d["families"] for d in gen.values()))
        out.append(f"| {len(gen)} procedural tasks (`env/procedural`) | "
                   f"{sum(d['programs'] for d in gen.values())} | "
                   f"{sum(d['ok'] for d in gen.values())} | {len(fams)} | (one per task) |")
    if results:
        n = results[0]["samples"]
        out += ["", f"## The policy: {n} samples per task", "",
                "| task | valid | statuses | families (samples each) | "
                ">=3 prints (all valid; LM-accepted) | "
                "LM instrumenter (calls/accepted/fallbacks) | best score |",
                "|---|---|---|---|---|---|---|"]
        for r in results:
            li = r["lm_instrumenter"]
            held = " (held out)" if r["task"] in settings.holdout_tasks else ""
            out.append(f"| {r['task']}{held} | {r['valid']}/{r['samples']} | {r['statuses']} | "
                       f"{r['n_families']}: {_counts(r)} | {r['hits_ge3']}/"
                       f"{r['valid_with_hits']}; {r['lm_hits_ge3']}/{r['lm_accepted_valid']} | "
                       f"{li['calls']}/{li['accepted']}/"
                       f"{li['fallbacks']} | {_fmt(r['best_score'])} |")
    return "\n".join(out) + "\n"
