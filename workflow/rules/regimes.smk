rule regimes:
    output:
        f"{OUT}/regimes/{{prefix}}regimes.parquet",
    input:
        calibration=lambda wc: f"{OUT}/rollouts/base_calibration{'_train' if wc.prefix else ''}.parquet",
        code=code("regimes"),
    wildcard_constraints:
        prefix="|train_",
    params:
        settings=as_param(settings.regimes_key(config)),
    threads: job_threads("cpu")
    resources:
        **job_resources("cpu"),
    log:
        f"{OUT}/logs/{{prefix}}regimes.log",
    benchmark:
        f"{OUT}/benchmarks/{{prefix}}regimes.tsv"
    conda:
        "../../envs/boundary.yaml"
    shell:
        "boundary regimes --calibration {input.calibration} --settings {params.settings:q} "
        "--out {output} > {log} 2>&1"
