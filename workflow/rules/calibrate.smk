# Frozen-base samples: the calibration cache (regime labels; the train split's only when an
# oracle mask needs train-prompt regimes) and the gate draws for every refresh epoch.
CALIBRATION_SPLIT = {"": "diagnostic", "_train": "train"}


if config["calibration"]["shards"] == 1:

    rule calibrate_base:
        input:
            model=base_model(),
            split=lambda wc: f"{OUT}/splits/{CALIBRATION_SPLIT[wc.part]}.parquet",
            code=code("calibrate"),
        output:
            f"{OUT}/rollouts/base_calibration{{part}}.parquet",
        log:
            f"{OUT}/logs/calibrate_base{{part}}.log",
        benchmark:
            f"{OUT}/benchmarks/calibrate_base{{part}}.tsv"
        wildcard_constraints:
            part="|_train",
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("sample")
        resources:
            **job_resources("sample", SAMPLE_GPUS),
        params:
            settings=lambda wc: settings.text(settings.calibrate_key(config, CALIBRATION_SPLIT[wc.part])),
        shell:
            "OMP_NUM_THREADS={threads} boundary --gpus {resources.gpu} calibrate --model {input.model} "
            "--split {input.split} "
            "--settings {params.settings:q} --out {output} > {log} 2>&1"

else:

    # Shards are kept (not temp): a GPU session that ends before all are made keeps those it made.
    rule calibrate_base_shard:
        input:
            model=base_model(),
            split=lambda wc: f"{OUT}/splits/{CALIBRATION_SPLIT[wc.part]}.parquet",
            code=code("calibrate"),
        output:
            f"{OUT}/rollouts/base_calibration{{part}}_shards/{{shard}}.parquet",
        log:
            f"{OUT}/logs/calibrate_base{{part}}/shard{{shard}}.log",
        benchmark:
            f"{OUT}/benchmarks/calibrate_base{{part}}/shard{{shard}}.tsv"
        wildcard_constraints:
            part="|_train",
            shard=r"\d+",
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("sample")
        resources:
            **job_resources("sample", SAMPLE_GPUS),
        params:
            settings=lambda wc: settings.text(settings.calibrate_key(config, CALIBRATION_SPLIT[wc.part])),
            shard=lambda wc: f"{wc.shard}/{config['calibration']['shards']}",
        shell:
            "OMP_NUM_THREADS={threads} boundary --gpus {resources.gpu} calibrate --model {input.model} "
            "--split {input.split} --settings {params.settings:q} --shard {params.shard} --out {output} "
            "> {log} 2>&1"

    rule calibrate_base:
        input:
            shards=lambda wc: calibration_shards(wc.part),
            split=lambda wc: f"{OUT}/splits/{CALIBRATION_SPLIT[wc.part]}.parquet",
            code=code("calibrate"),
        output:
            f"{OUT}/rollouts/base_calibration{{part}}.parquet",
        log:
            f"{OUT}/logs/calibrate_base{{part}}.log",
        benchmark:
            f"{OUT}/benchmarks/calibrate_base{{part}}.tsv"
        wildcard_constraints:
            part="|_train",
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("cpu")
        resources:
            **job_resources("cpu"),
        params:
            settings=lambda wc: settings.text(settings.calibrate_key(config, CALIBRATION_SPLIT[wc.part])),
        shell:
            "boundary calibrate --split {input.split} --settings {params.settings:q} --gather {input.shards} "
            "--out {output} > {log} 2>&1"


rule gate_draws:
    input:
        model=base_model(),
        split=f"{OUT}/splits/train.parquet",
        code=code("gate-draws"),
    output:
        f"{OUT}/rollouts/base_gate.parquet",
    log:
        f"{OUT}/logs/gate_draws.log",
    benchmark:
        f"{OUT}/benchmarks/gate_draws.tsv"
    conda:
        "../../envs/boundary.yaml"
    threads: job_threads("sample")
    resources:
        **job_resources("sample", SAMPLE_GPUS),
    params:
        settings=as_param(settings.gate_draws_key(config)),
    shell:
        "OMP_NUM_THREADS={threads} boundary --gpus {resources.gpu} gate-draws --model {input.model} "
        "--split {input.split} "
        "--settings {params.settings:q} --out {output} > {log} 2>&1"
