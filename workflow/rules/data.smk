# The generated arithmetic task (config `arithmetic:`): plain JSONL splits that `data:` entries
# name like any other file.
if config["arithmetic"]:

    rule arithmetic:
        output:
            arithmetic_files(),
        input:
            code=code("arithmetic"),
        params:
            out_dir=f"{OUT}/arithmetic",
            splits=" ".join(f"--split {k}={v}" for k, v in config["arithmetic"]["splits"].items()),
            seed=config["arithmetic"]["seed"],
            levels=levels_text(config["arithmetic"]["levels"]),
        threads: job_threads("cpu")
        resources:
            **job_resources("cpu"),
        log:
            f"{OUT}/logs/arithmetic.log",
        benchmark:
            f"{OUT}/benchmarks/arithmetic.tsv"
        conda:
            "../../envs/boundary.yaml"
        shell:
            "boundary arithmetic --out-dir {params.out_dir} {params.splits} --seed {params.seed} "
            "--levels {params.levels:q} > {log} 2>&1"


rule splits:
    output:
        train=f"{OUT}/splits/train.parquet",
        diagnostic=f"{OUT}/splits/diagnostic.parquet",
        benchmarks=expand(f"{OUT}/splits/bench_{{b}}.parquet", b=BENCHMARKS),
    input:
        # The chat template is the imported base model's tokenizer's.
        model=[base_model()] if config["prompt"]["chat"] else [],
        data=generated_data(),
        code=code("data"),
    params:
        settings=as_param(
            {"testbed": config["testbed"], "data": config["data"], "prompt": config["prompt"]}
        ),
        out_dir=lambda wc, output: Path(output.train).parent,
        model_arg=lambda wc, input: f"--model {input.model}" if input.model else "",
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
        "boundary data --settings {params.settings:q} --out-dir {params.out_dir} "
        "{params.model_arg} > {log} 2>&1"
