"""tasks: what a problem is and how an answer is graded. The synthetic two-mode testbed
(prompts with a known w*(x), its tokenizer, tiny model and pretraining) and the verifier
(answer extraction, math-verify in worker processes with hard timeouts).

May import: core.
"""
