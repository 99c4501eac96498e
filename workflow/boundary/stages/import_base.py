"""The `import-base` stage: a base model (folder, hub id or GGUF) written once as a plain folder."""

from __future__ import annotations

from boundary.core.options import ArgumentParser
from boundary.sampling.models import import_base


def main(argv=None):
    parser = ArgumentParser(prog="boundary import-base", description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="model folder, hub id or .gguf file")
    parser.add_argument("--out", required=True, help="models/base folder to write")
    args = parser.parse_args(argv)
    import_base(args.source, args.out)
