# Frozen-base rollouts of the base-sampled anchors (anchor base or support), drawn before
# training by the sampling backend, in sampling.shards jobs; the trainer only reads them.
if PRE_DRAWN:

    rule base_rollouts:
        input:
            model=base_model(),
            split=f"{OUT}/splits/train.parquet",
            mask=lambda wc: f"{OUT}/masks/{TRAINED[wc.method]['mask']}.parquet",
            code=code("base-rollouts"),
        output:
            f"{OUT}/base_rollouts/{{method}}/seed{{seed}}/{{shard}}.parquet",
        log:
            f"{OUT}/logs/base_rollouts/{{method}}/seed{{seed}}/{{shard}}.log",
        benchmark:
            f"{OUT}/benchmarks/base_rollouts/{{method}}/seed{{seed}}/{{shard}}.tsv"
        wildcard_constraints:
            method="|".join(PRE_DRAWN),
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("sample")
        resources:
            **job_resources("sample", SAMPLE_GPUS),
        params:
            settings=lambda wc: settings.text(settings.train_key(config, wc.method)),
            shard=lambda wc: f"{wc.shard}/{config['sampling']['shards']}",
            backend=config["sampling"]["backend"],
        shell:
            "OMP_NUM_THREADS={threads} boundary --gpus {resources.gpu} base-rollouts --model {input.model} "
            "--train-split {input.split} --mask {input.mask} --settings {params.settings:q} "
            "--seed {wildcards.seed} --backend {params.backend} --shard {params.shard} --out {output} "
            "> {log} 2>&1"


# One TRL trainer for every method. Resumable checkpoints live outside results/ (Snakemake
# deletes declared outputs before a job starts); `boundary train` keys them by everything the
# run is trained from (settings, seed, prompts, mask weights, base files, code), so a changed
# input never resumes a stale run. `exec`: the shell becomes `boundary train`, so a SIGTERM
# (slurm.train_stop_seconds) reaches it and Snakemake waits for its checkpoint and exit 75;
# a shell left waiting would die of the signal and end the job's step under it.
for _method in TRAINED:

    rule:
        name:
            f"train_{_method}"
        input:
            model=base_model(),
            split=f"{OUT}/splits/train.parquet",
            mask=([f"{OUT}/masks/{TRAINED[_method]['mask']}.parquet"] if TRAINED[_method]["mask"] else []),
            base_rollouts=lambda wc, _m=_method: base_rollout_files(_m, wc.seed),
            code=code("train"),
        output:
            final=directory(f"{OUT}/train/{_method}/seed{{seed}}/final"),
            log=f"{OUT}/train/{_method}/seed{{seed}}/log.parquet",
            actions=f"{OUT}/train/{_method}/seed{{seed}}/actions.parquet",
            checkpoints=train_outputs(_method),
        log:
            f"{OUT}/logs/train/{_method}/seed{{seed}}.log",
        benchmark:
            f"{OUT}/benchmarks/train/{_method}/seed{{seed}}.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("train")
        resources:
            **job_resources("train", config["train"]["gpus"], own=TRAIN_OWNS),
        params:
            settings=as_param(settings.train_key(config, _method)),
            mask_arg=lambda wc, input: f"--mask {input.mask}" if input.mask else "",
            rollouts_arg=lambda wc, input: (f"--base-rollouts {input.base_rollouts}" if input.base_rollouts else ""),
            checkpoint_dir=lambda wc, _m=_method: f"checkpoints/{RUN}/{_m}/seed{wc.seed}",
            out_dir=lambda wc, _m=_method: f"{OUT}/train/{_m}/seed{wc.seed}",
            gpus=TRAIN_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} exec boundary --gpus {params.gpus} train --model {input.model} "
            "--train-split {input.split} "
            "{params.mask_arg} {params.rollouts_arg} --settings {params.settings:q} --seed {wildcards.seed} "
            "--out {params.out_dir} --checkpoint-dir {params.checkpoint_dir} > {log} 2>&1"
