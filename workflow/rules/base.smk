# The testbed's base model is pretrained here; real configs point base_model at a folder.
if TESTBED:

    rule pretrain_base:
        output:
            directory(f"{OUT}/models/base"),
        input:
            code=code("testbed"),
        params:
            settings=as_param(
                {k: config["testbed"][k] for k in ("task", "model", "pretrain")}
            ),
        threads: job_threads("base")
        resources:
            **job_resources("base"),
        log:
            f"{OUT}/logs/pretrain_base.log",
        benchmark:
            f"{OUT}/benchmarks/pretrain_base.tsv"
        conda:
            "../../envs/boundary.yaml"
        shell:
            "OMP_NUM_THREADS={threads} boundary pretrain --settings {params.settings:q} "
            "--out {output} > {log} 2>&1"
