rule regimes:
    input:
        calibration=lambda wc: f"{OUT}/rollouts/base_calibration{'_train' if wc.prefix else ''}.parquet",
        code=code("regimes"),
    output:
        f"{OUT}/regimes/{{prefix}}regimes.parquet",
    log:
        f"{OUT}/logs/{{prefix}}regimes.log",
    benchmark:
        f"{OUT}/benchmarks/{{prefix}}regimes.tsv"
    wildcard_constraints:
        prefix="|train_",
    conda:
        "../../envs/boundary.yaml"
    threads: job_threads("cpu")
    resources:
        **job_resources("cpu"),
    params:
        settings=as_param(settings.regimes_key(config)),
    shell:
        "boundary regimes --calibration {input.calibration} --settings {params.settings:q} "
        "--out {output} > {log} 2>&1"
