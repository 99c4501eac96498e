"""`boundary export`: a LoRA policy (adapter folder) merged into its base, written as a plain model folder.

The merge is computed in fp32 and cast once to the dtype the base folder was saved in; the
folder holds the weights (safetensors), the config, the base's generation config (its stop ids)
and the adapter's tokenizer, so `transformers.AutoModelForCausalLM.from_pretrained` opens it and
any stage, vLLM or another tool samples it like the base. It is written atomically: a failed or
interrupted export leaves no half-written folder, and a folder `--out` that `boundary export`
did not write is refused before anything loads.
"""

from __future__ import annotations

from boundary.core.options import ArgumentParser, description
from boundary.sampling.models import export


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary export", description=description(__doc__),
                            epilog="example:\n  boundary export --adapter results/run/train/pba/seed0/final "
                                   "--base results/run/models/base --out models/pba-seed0")
    parser.add_argument("--adapter", required=True, help="LoRA policy folder (the train stage's final/ or step*/)")
    parser.add_argument("--base", required=True, help="the base model folder it was trained on (the run's models/base)")
    parser.add_argument("--out", required=True, help="model folder to write")
    return parser


def main(argv=None):
    args = make_parser().parse_args(argv)
    info = export(args.adapter, args.base, args.out)
    print(f"export: {args.out}: " + ", ".join(f"{k}={v}" for k, v in info.items()))
