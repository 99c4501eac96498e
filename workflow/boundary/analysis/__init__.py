"""analysis: from per-prompt counts to the paper's answers. Statistics over seeds and prompts
(stats), regime labels (regimes), the attribution of Δpass@k, the diagnosis (diagnose, also
the `boundary diagnose` and `boundary seeds` commands), tables, figures, the HTML page and
the report. Needs no torch: `pip install boundary[analysis]` is enough.

May import: core, tasks, readers, training.gate (masks are read, never built, here).
"""
