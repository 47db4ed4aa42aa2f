"""Files in and out: checkpoints, metrics logs, policies.

    checkpoint.py         orbax checkpoints of the trainer (kill -9 safe), errors for people
    checkpoint_format.py  how a checkpoint's items are encoded; config compatibility on resume
    metrics_log.py        metrics.jsonl + TensorBoard, the progress line, reward curve, summary
    policy.py             a policy and its tokenizer from an HF dir (or random), prompt text
                          <-> token ids
"""
