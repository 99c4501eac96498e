"""A pytest plugin (`-p suite_no_gpu`) for the product's tests on a GPU machine whose GPUs train
beside them (lab/lease/suite_on_device.sh): every pytest process (the controller and each xdist
worker) starts CUDA's runtime at its start, with CUDA_VISIBLE_DEVICES empty. The driver reads that
variable once, at its start, and torch counts devices once (c10's device count), so the process
sees no GPU for its whole life: tests that set CUDA_VISIBLE_DEVICES to "0" or "0,1" (GPU claims,
launch plans, with torch's count faked) cannot let a later test in the same worker take memory on
the training's GPUs or run a GPU code path no CPU test means to run."""

from __future__ import annotations

import os


def pytest_configure(config):
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        raise RuntimeError("suite_no_gpu: CUDA_VISIBLE_DEVICES must be set and empty")
    import torch

    # torch.cuda.device_count() reads the variable again at each call (NVML): not this one.
    if torch.cuda._is_compiled() and torch._C._cuda_getDeviceCount():
        raise RuntimeError("suite_no_gpu: CUDA sees a GPU with CUDA_VISIBLE_DEVICES empty")
