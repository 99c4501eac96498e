"""The `import-base` stage: a base model (folder, hub id or GGUF) written once as a plain folder."""

from __future__ import annotations

from boundary.core.options import ArgumentParser, description
from boundary.sampling.models import import_base


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary import-base", description=description(__doc__),
                            epilog="example:\n  boundary import-base --source HuggingFaceTB/SmolLM2-135M "
                                   "--out results/smollm2/models/base")
    parser.add_argument("--source", required=True, help="model folder, hub id or .gguf file")
    parser.add_argument("--out", required=True, help="models/base folder to write")
    return parser


def main(argv=None):
    args = make_parser().parse_args(argv)
    import_base(args.source, args.out)
