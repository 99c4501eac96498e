"""The `pretrain` stage: the synthetic testbed's base model, pretrained on the exact two-mode loss."""

from __future__ import annotations

import json

from boundary.tasks.testbed import PretrainConfig, TinyModelConfig, pretrain, task_from_settings


def make_parser():
    from boundary.core.options import ArgumentParser, description

    parser = ArgumentParser(prog="boundary pretrain", description=description(__doc__))
    parser.add_argument("--settings", required=True, help="JSON of the testbed settings")
    parser.add_argument("--out", required=True, help="model folder (save_pretrained), replaced as a whole")
    return parser


def main(argv=None):
    from boundary.core import settings as stage_settings
    from boundary.core.artifacts import output_folder

    args = make_parser().parse_args(argv)
    output_folder(args.out, "boundary pretrain")  # a bad --out fails before pretraining
    settings = stage_settings.load("pretrain", args.settings)
    task = task_from_settings(settings)
    model, config = TinyModelConfig(**settings["model"]), PretrainConfig(**settings["pretrain"])
    stats = pretrain(task, model, config, args.out)
    print(json.dumps(stats, sort_keys=True))
