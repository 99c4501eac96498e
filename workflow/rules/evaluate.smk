# n-sample evaluation of the base and every policy on the diagnostic split and benchmarks.
# A LoRA policy is an adapter folder: the base folder is its other half.
# With sampling.shards > 1 each evaluation scatters into shard jobs and gathers into one.
if config["sampling"]["shards"] == 1:

    rule evaluate:
        input:
            model=lambda wc: policy_dir(wc.method, int(wc.seed)),
            base=base_model(),
            split=eval_split,
            code=code("evaluate"),
        output:
            samples=f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/samples.parquet",
            counts=f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/counts.parquet",
        log:
            f"{OUT}/logs/evaluate/{{bench}}/{{method}}/seed{{seed}}.log",
        benchmark:
            f"{OUT}/benchmarks/evaluate/{{bench}}/{{method}}/seed{{seed}}.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("sample")
        resources:
            **job_resources("sample", SAMPLE_GPUS),
        params:
            settings=lambda wc: settings.text(settings.evaluate_key(config, wc.bench, wc.method, int(wc.seed))),
        shell:
            "OMP_NUM_THREADS={threads} boundary --gpus {resources.gpu} evaluate --model {input.model} "
            "--base {input.base} --split {input.split} --settings {params.settings:q} --samples {output.samples} --counts {output.counts} "
            "> {log} 2>&1"

else:

    rule evaluate_shard:
        input:
            model=lambda wc: policy_dir(wc.method, int(wc.seed)),
            base=base_model(),
            split=eval_split,
            code=code("evaluate"),
        output:
            temp(f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/shards/{{shard}}.parquet"),
        log:
            f"{OUT}/logs/evaluate/{{bench}}/{{method}}/seed{{seed}}/shard{{shard}}.log",
        benchmark:
            f"{OUT}/benchmarks/evaluate/{{bench}}/{{method}}/seed{{seed}}/shard{{shard}}.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("sample")
        resources:
            **job_resources("sample", SAMPLE_GPUS),
        params:
            settings=lambda wc: settings.text(settings.evaluate_key(config, wc.bench, wc.method, int(wc.seed))),
            shard=lambda wc: f"{wc.shard}/{config['sampling']['shards']}",
        shell:
            "OMP_NUM_THREADS={threads} boundary --gpus {resources.gpu} evaluate --model {input.model} "
            "--base {input.base} --split {input.split} --settings {params.settings:q} --shard {params.shard} --samples {output} "
            "> {log} 2>&1"

    rule evaluate:
        input:
            shards=lambda wc: expand(
                f"{OUT}/eval/{wc.bench}/{wc.method}/seed{wc.seed}/shards/{{i}}.parquet",
                i=range(config["sampling"]["shards"]),
            ),
            code=code("evaluate"),
        output:
            samples=f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/samples.parquet",
            counts=f"{OUT}/eval/{{bench}}/{{method}}/seed{{seed}}/counts.parquet",
        log:
            f"{OUT}/logs/evaluate/{{bench}}/{{method}}/seed{{seed}}.log",
        benchmark:
            f"{OUT}/benchmarks/evaluate/{{bench}}/{{method}}/seed{{seed}}.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("cpu")
        resources:
            **job_resources("cpu"),
        params:
            settings=lambda wc: settings.text(settings.evaluate_key(config, wc.bench, wc.method, int(wc.seed))),
        shell:
            "boundary evaluate --settings {params.settings:q} --gather {input.shards} "
            "--samples {output.samples} --counts {output.counts} > {log} 2>&1"
