"""training: the TRL trainer and what it is made of. The trainer (PBATrainer) and its config
(PBAConfig, make_config) in TRL's shape, the anchors, the field's objectives, the action
schedule, the gate's masks, the frozen-base rollouts (planned, drawn, read, supplied), and
the torchrun launch.

May import: core, tasks, sampling.
"""
