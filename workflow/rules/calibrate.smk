# Frozen-base samples: the calibration cache (regime labels; the train split's only when an
# oracle mask needs train-prompt regimes) and the gate draws for every refresh epoch.
CALIBRATION_SPLIT = {"": "diagnostic", "_train": "train"}


rule calibrate_base:
    output:
        f"{OUT}/rollouts/base_calibration{{part}}.parquet",
    input:
        model=base_model(),
        split=lambda wc: f"{OUT}/splits/{CALIBRATION_SPLIT[wc.part]}.parquet",
        code=code("calibrate", "rollouts", "sampling", "verify"),
    wildcard_constraints:
        part="|_train",
    params:
        settings=dumps({"calibration": config["calibration"], **sampling_settings()}),
    threads: 1
    resources:
        gpu=1 if config["train"]["gpus"] else 0,
    log:
        f"{OUT}/logs/calibrate_base{{part}}.log",
    benchmark:
        f"{OUT}/benchmarks/calibrate_base{{part}}.tsv"
    conda:
        "../../envs/boundary.yaml"
    shell:
        "OMP_NUM_THREADS={threads} boundary calibrate --model {input.model} --split {input.split} "
        "--settings {params.settings:q} --out {output} > {log} 2>&1"


def gate_draw_settings():
    """One cache for every gate mask: the largest G0 any of them reads, every epoch."""
    sizes = [mask_settings(m)["G0"] for m, s in config["masks"].items() if s["kind"] in ("gate", "soft")]
    gate = {k: config["gate"][k] for k in ("seed", "temperature", "top_p")}
    return {"gate": {**gate, "G0": max(sizes + [config["gate"]["G0"]]), "epochs": refresh_epochs()},
            **sampling_settings()}


rule gate_draws:
    output:
        f"{OUT}/rollouts/base_gate.parquet",
    input:
        model=base_model(),
        split=f"{OUT}/splits/train.parquet",
        code=code("calibrate", "rollouts", "sampling", "verify"),
    params:
        settings=dumps(gate_draw_settings()),
    threads: 1
    resources:
        gpu=1 if config["train"]["gpus"] else 0,
    log:
        f"{OUT}/logs/gate_draws.log",
    benchmark:
        f"{OUT}/benchmarks/gate_draws.tsv"
    conda:
        "../../envs/boundary.yaml"
    shell:
        "OMP_NUM_THREADS={threads} boundary gate-draws --model {input.model} --split {input.split} "
        "--settings {params.settings:q} --out {output} > {log} 2>&1"
