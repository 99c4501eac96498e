"""boundary: diagnose pass@k inversion in RLVR and train with Per-Problem Base Anchoring."""

__version__ = "0.2.0"
