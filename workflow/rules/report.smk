# The paper's tables and figures, from every per-prompt count file, the regimes and masks:
# exactly the files listed as inputs (a stale file of a method no longer configured stays out).


rule report:
    input:
        counts=[t for b in [DIAGNOSTIC] + BENCHMARKS for t in eval_targets(b)],
        regimes=f"{OUT}/regimes/regimes.parquet",
        split=f"{OUT}/splits/diagnostic.parquet",
        samples=eval_samples(DIAGNOSTIC),
        masks=mask_files(),
        logs=[f"{OUT}/train/{m}/seed{s}/log.parquet" for m in TRAINED for s in seeds_of(m)],
        code=code("report"),
    output:
        report_outputs(),
    log:
        f"{OUT}/logs/report.log",
    benchmark:
        f"{OUT}/benchmarks/report.tsv"
    conda:
        "../../envs/boundary.yaml"
    threads: job_threads("cpu")
    resources:
        **job_resources("cpu"),
    params:
        settings=as_param(REPORT),
        results=lambda wc, input: Path(input.regimes).parent.parent,
    shell:
        "boundary report --results {params.results} --settings {params.settings:q} "
        "--counts {input.counts} --samples {input.samples} --masks {input.masks} --logs {input.logs} > {log} 2>&1"


# A run that made the report ends by naming its page.
onsuccess:
    if Path(f"{OUT}/report.html").is_file():
        print(f"report: {OUT}/report.html", flush=True)
