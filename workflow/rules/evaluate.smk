rule evaluate:
    output:
        samples=f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/samples.parquet",
        counts=f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/counts.parquet",
    input:
        model=lambda wc: policy_dir(wc.method, int(wc.seed)),
        split=eval_split,
        code=code("evaluate", "rollouts", "sampling", "verify", "passk"),
    params:
        settings=as_param({"evaluate": config["evaluate"], **sampling_settings()}),
    threads: 1
    resources:
        gpu=1 if config["train"]["gpus"] else 0,
    log:
        f"{OUT}/logs/evaluate/{{bench}}/{{method}}/seed{{seed}}.log",
    benchmark:
        f"{OUT}/benchmarks/evaluate/{{bench}}/{{method}}/seed{{seed}}.tsv"
    conda:
        "../../envs/boundary.yaml"
    shell:
        "OMP_NUM_THREADS={threads} boundary evaluate --model {input.model} --split {input.split} "
        "--settings {params.settings:q} --samples {output.samples} --counts {output.counts} "
        "> {log} 2>&1"
