# The generated arithmetic task (config `arithmetic:`): plain JSONL splits that `data:` entries
# name like any other file.
if config["arithmetic"]:

    rule arithmetic:
        input:
            code=code("arithmetic"),
        output:
            arithmetic_files(),
        log:
            f"{OUT}/logs/arithmetic.log",
        benchmark:
            f"{OUT}/benchmarks/arithmetic.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("cpu")
        resources:
            **job_resources("cpu"),
        params:
            out_dir=f"{OUT}/arithmetic",
            splits=" ".join(f"--split {k}={v}" for k, v in config["arithmetic"]["splits"].items()),
            seed=config["arithmetic"]["seed"],
            levels=levels_text(config["arithmetic"]["levels"]),
            share=(
                f"--max-answer-share {config['arithmetic']['max_answer_share']}"
                if config["arithmetic"]["max_answer_share"] is not None
                else ""
            ),
        shell:
            "boundary arithmetic --out {params.out_dir} {params.splits} --seed {params.seed} "
            "--levels {params.levels:q} {params.share} > {log} 2>&1"


# The splits. The testbed's are generated together; a real config's are one job per split,
# each reading one data file, tracked by content: a corrected gold answer reruns exactly the
# split read from that file and what depends on it.
if TESTBED:

    rule splits:
        input:
            code=code("data"),
        output:
            train=f"{OUT}/splits/train.parquet",
            diagnostic=f"{OUT}/splits/diagnostic.parquet",
            benchmarks=expand(f"{OUT}/splits/bench_{{b}}.parquet", b=BENCHMARKS),
        log:
            f"{OUT}/logs/splits.log",
        benchmark:
            f"{OUT}/benchmarks/splits.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("cpu")
        resources:
            **job_resources("cpu"),
        params:
            settings=as_param(settings.data_key(config)),
            out_dir=lambda wc, output: Path(output.train).parent,
        shell:
            "boundary data --settings {params.settings:q} --out {params.out_dir} > {log} 2>&1"

else:

    rule splits:
        input:
            # The chat template is the imported base model's tokenizer's.
            model=[base_model()] if config["prompt"]["chat"] else [],
            data=lambda wc: generated_data(wc.split),
            code=code("data"),
        output:
            f"{OUT}/splits/{{split}}.parquet",
        log:
            f"{OUT}/logs/splits/{{split}}.log",
        benchmark:
            f"{OUT}/benchmarks/splits/{{split}}.tsv"
        wildcard_constraints:
            split="|".join(["train", "diagnostic"] + [f"bench_{b}" for b in BENCHMARKS]),
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("cpu")
        resources:
            **job_resources("cpu"),
        params:
            settings=lambda wc: settings.text(settings.data_key(config, wc.split)),
            # A file a rule of this run writes is an input instead (its digest is unknown
            # until that rule has run).
            data=content(
                lambda wc: None if generated_data(wc.split) else settings.dataset_spec(config, wc.split)["path"]
            ),
            out_dir=lambda wc, output: Path(output[0]).parent,
            model_arg=lambda wc, input: f"--model {input.model}" if input.model else "",
        shell:
            "boundary data --settings {params.settings:q} --out {params.out_dir} " "{params.model_arg} > {log} 2>&1"
