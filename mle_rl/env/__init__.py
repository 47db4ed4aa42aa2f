"""The environment: an action is text in, an `ActionResult` out. No JAX here.

    action.py        run_action: response -> plan + code -> instrument -> sandbox -> grade
                     -> reward, with Δt (the program's own wall time)
    tasks.py         the task registry (built-in tasks in builtin/, MLE-bench, user tasks);
                     types.py: Task, ActionResult
    prompts.py       the solve / improve prompts, and parsing of a response
    instrument.py    the AST instrumenter (partial-credit prints), nonces
    rewards.py       reward schemes (rl4mle, mlagent); families.py: model family of a program
    sandbox.py       one untrusted program under bubblewrap + a cgroup (sandbox_boot.py,
                     sandbox_fs.py, cgroups.py, isolation.py, janitor.py, output_tail.py);
                     warm_pool.py: pre-started sandboxes
    graders.py       MLE-bench's grading (metrics.py, submission_file.py, mlebench.py,
                     GRADING.md)
    pysource.py      parse / unparse / compile of generated code, safe across threads
"""
