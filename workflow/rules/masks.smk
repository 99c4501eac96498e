rule mask:
    input:
        gate_draws=f"{OUT}/rollouts/base_gate.parquet",
        split=f"{OUT}/splits/train.parquet",
        train_regimes=lambda wc: (
            [f"{OUT}/regimes/train_regimes.parquet"] if config["masks"][wc.mask]["kind"] == "oracle" else []
        ),
        code=code("masks"),
    output:
        f"{OUT}/masks/{{mask}}.parquet",
    log:
        f"{OUT}/logs/masks/{{mask}}.log",
    benchmark:
        f"{OUT}/benchmarks/masks/{{mask}}.tsv"
    conda:
        "../../envs/boundary.yaml"
    threads: job_threads("cpu")
    resources:
        **job_resources("cpu"),
    params:
        kind=lambda wc: config["masks"][wc.mask]["kind"],
        settings=lambda wc: settings.text(settings.mask_key(config, wc.mask)),
        regimes_arg=lambda wc, input: (f"--train-regimes {input.train_regimes}" if input.train_regimes else ""),
    shell:
        "boundary masks --kind {params.kind} --gate-draws {input.gate_draws} {params.regimes_arg} "
        "--train-split {input.split} --settings {params.settings:q} --out {output} > {log} 2>&1"
