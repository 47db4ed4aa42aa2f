"""The warm start (ML-Agent): the default CPU policy built from nothing.

    generic.py       task-generic tabular programs: one paragraph per decision (metric,
                     target transform, model family, capacity, regularization, features,
                     validation); valid on any table, tasks never seen included
    action_pool.py   strategies on the data / model / learning axes; farthest-point combos
    programs.py      combos -> (plan, program) for the image, text and span built-ins;
                     programs_span.py: the span task's own program skeleton
    corpus.py        expert trajectories on the built-ins and on procedural tasks
                     (env/procedural): run in the sandbox; solve / improve /
                     instrumentation examples; the states pool for step-wise RL
    tokenizer.py     byte-level BPE (AutoTokenizer-loadable, Qwen2 chat format)
    sft_data.py      examples -> prompts exactly as the environment asks -> batches
    sft.py           response-only SFT, jitted and donated, on the mesh; loss curve
    pipeline.py      build(...) and ensure_default_policy()
    lm_instrument.py the frozen-LM instrumenter (acceptance check, AST fallback, counts)
    frozen.py        a frozen model as a generator (generate_texts, load_tokenizer);
                     load_lm_instrumenter()
    states.py        ExpertStatesSource (--prompt_source=expert_states), MixedSource
    evaluate.py      N samples per task -> valid fraction, families, instrumenter hits
    report.py        the markdown report and closing note
"""
