rule splits:
    output:
        train=f"{OUT}/splits/train.parquet",
        diagnostic=f"{OUT}/splits/diagnostic.parquet",
        benchmarks=expand(f"{OUT}/splits/bench_{{b}}.parquet", b=BENCHMARKS),
    input:
        code=code("data", "testbed"),
    params:
        settings=as_param(
            {
                "testbed": config["testbed"],
                "data": config["data"],
                "prompt": config["prompt"],
                "base_model": config["base_model"],
            }
        ),
        out_dir=lambda wc, output: Path(output.train).parent,
    threads: job_threads("cpu")
    resources:
        **job_resources("cpu"),
    log:
        f"{OUT}/logs/splits.log",
    benchmark:
        f"{OUT}/benchmarks/splits.tsv"
    conda:
        "../../envs/boundary.yaml"
    shell:
        "boundary data --settings {params.settings:q} --out-dir {params.out_dir} > {log} 2>&1"
