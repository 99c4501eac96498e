# The base model folder every stage loads: the testbed's is pretrained here; a real config's
# base_model (a folder, hub id or GGUF file) is imported into a plain folder once.
if TESTBED:

    rule pretrain_base:
        input:
            code=code("pretrain"),
        output:
            directory(f"{OUT}/models/base"),
        log:
            f"{OUT}/logs/pretrain_base.log",
        benchmark:
            f"{OUT}/benchmarks/pretrain_base.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("base")
        resources:
            **job_resources("base"),
        params:
            settings=as_param(settings.pretrain_key(config)),
        shell:
            "OMP_NUM_THREADS={threads} boundary pretrain --settings {params.settings:q} " "--out {output} > {log} 2>&1"

else:

    rule import_base:
        input:
            code=code("import-base"),
        output:
            directory(f"{OUT}/models/base"),
        log:
            f"{OUT}/logs/import_base.log",
        benchmark:
            f"{OUT}/benchmarks/import_base.tsv"
        conda:
            "../../envs/boundary.yaml"
        threads: job_threads("base")
        resources:
            **job_resources("base"),
        params:
            source=config["base_model"],
            # The source by content (a folder's files re-saved in place change no mtime that
            # Snakemake sees); a hub id is only its name.
            content=content(lambda wc: config["base_model"]) if Path(config["base_model"]).exists() else "",
        shell:
            "OMP_NUM_THREADS={threads} boundary import-base --source {params.source:q} " "--out {output} > {log} 2>&1"
