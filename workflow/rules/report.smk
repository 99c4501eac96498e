# Placeholder wiring until the report stage lands: the report consumes every count file.
def report_outputs():
    return [t for b in ["diagnostic"] + BENCHMARKS for t in eval_targets(b)] + [
        f"{OUT}/regimes/regimes.parquet"
    ]
