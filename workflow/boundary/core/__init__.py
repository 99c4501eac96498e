"""core: what every layer uses. The one user-error type (errors), atomic reads and writes
(artifacts), the config and its schema (config), each stage's settings from it, every default
resolved once (settings), option types (options), the
package's own import graph (sources), GPU claims (gpus), the SLURM check (cluster) and the
unbiased pass@k estimator (passk).

May import: nothing of boundary outside core.
"""
