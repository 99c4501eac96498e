"""stages: one module per pipeline stage, each the `boundary <stage>` command that one rule
runs (rule -> `boundary <stage>` -> stages/<stage>.py): parse options, read the inputs,
call the layer that does the work, write the outputs atomically.

May import: every layer below (core, tasks, sampling, training, readers, analysis).
"""
