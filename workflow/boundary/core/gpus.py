"""The GPUs of one job: `boundary --gpus N <stage>` claims N devices no other job holds.

Snakemake counts `resources: gpu` but never says which device a job gets, so on a
workstation concurrent GPU jobs all land on GPU 0. Here a job takes one lock file per
device (flock, held for the life of the process: the kernel drops it however the process
ends, so a killed job never leaves a slot taken) and hands its devices to the stage and
any processes it starts through CUDA_VISIBLE_DEVICES. A job that asks for 0 GPUs sees none,
so it cannot land on a device another job claimed. Under SLURM the scheduler has already
picked the job's devices (it sets CUDA_VISIBLE_DEVICES); they are used as given.

A small model leaves a large GPU mostly idle (a 135M model's sampling steps are launch-bound),
so a workstation may let each device hold several jobs at once: $BOUNDARY_JOBS_PER_GPU slots
per device, one lock file each; a job's N GPUs are still N distinct devices. Jobs spread: a
job takes the N least-loaded devices with a free slot (fewest slots held, ties by device
order), not the first free slots, which packed twelve jobs onto three of four GPUs. A device's
load is read by try-locking its slot files; one job reads and claims at a time (a short-held
allocation lock, dropped by the kernel like the rest), so two jobs never both pick the device
that looked idlest.

A job may own its devices (`claim(n, own=True)`, `boundary --gpus N --own`): it takes every
slot of N devices that no job holds, so no other job starts there while it runs. A training job
with a colocated vLLM engine needs this: vLLM sizes its memory from what it finds free while it
starts, and it stops when a neighbour frees memory meanwhile (its profiling assertion). An owning
job that finds no whole device free reserves the N least-loaded ones (a reservation lock per
device, all N or none, so two owners never deadlock on each other's halves): shared jobs take no
new slot there, the jobs already there finish, and the owner then takes the device. Inside the
block the job sees $BOUNDARY_JOBS_PER_GPU=1, so whatever sizes itself by its share of a device
(the hf backend's batch, the sampling engine's memory) takes the whole device.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from boundary.core.errors import BoundaryError

LOCK_DIR_ENV = "BOUNDARY_GPU_LOCKS"  # where the per-device lock files live (one per machine)
SLOTS_ENV = "BOUNDARY_JOBS_PER_GPU"  # jobs one device may hold at once (default 1)


def visible() -> list[str]:
    """Devices this process may use: CUDA_VISIBLE_DEVICES when set, else every device
    torch counts (NVML, which does not initialise CUDA)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    devices = []
    for entry in env.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):  # CUDA stops at the first invalid entry
            break
        devices.append(entry)
    return devices


def describe(devices: list[str]) -> str:
    where = ("CUDA_VISIBLE_DEVICES=" + os.environ["CUDA_VISIBLE_DEVICES"]
             if "CUDA_VISIBLE_DEVICES" in os.environ else "all devices torch counts")
    return f"{len(devices)} GPU(s) ({where})"


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "boundary-gpus")


def jobs_per_gpu() -> int:
    value = os.environ.get(SLOTS_ENV, "1")
    if not value.isdigit() or int(value) < 1:
        raise BoundaryError(f"${SLOTS_ENV}: {value!r} is not a positive job count")
    return int(value)


def _device_name(device: str) -> str:
    return re.sub(r'[^A-Za-z0-9_.-]', '_', device)


def _slot_path(folder: Path, device: str, slot: int) -> Path:
    name = _device_name(device)
    return folder / (f"gpu-{name}.lock" if slot == 0 else f"gpu-{name}.slot{slot}.lock")


def _reservation_path(folder: Path, device: str) -> Path:
    """Held by a job that waits to own the device: no new shared job starts there."""
    return folder / f"gpu-{_device_name(device)}.own.lock"


def _try_lock(path: Path) -> int | None:
    """An open file holding an exclusive lock on `path`, or None if another holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)  # flock needs no write access
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _free_slots(folder: Path, device: str, slots: int) -> list[int]:
    """Locks on every slot of `device` no job holds (so len() is its free count)."""
    return [fd for slot in range(slots)
            if (fd := _try_lock(_slot_path(folder, device, slot))) is not None]


@contextlib.contextmanager
def _allocating(folder: Path):
    """One job reads the devices' loads and claims at a time, so each sees the others' claims."""
    fd = os.open(folder / "allocate.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a few dozen try-locks, never while waiting
        yield
    finally:
        os.close(fd)


def _reserved_by_others(folder: Path, devices: list[str], mine: dict[str, int]) -> set[str]:
    """Devices whose reservation another job holds (a try-lock of each that this job lacks)."""
    taken = set()
    for device in devices:
        if device in mine:
            continue
        fd = _try_lock(_reservation_path(folder, device))
        if fd is None:
            taken.add(device)
        else:
            os.close(fd)
    return taken


def _take(devices: list[str], n: int, folder: Path, own: bool = False,
          reserved: dict[str, int] | None = None) -> tuple[list[str], list[int]] | None:
    """All-or-nothing: the n least-loaded devices with a free slot (fewest slots held, ties by
    device order) and one slot lock on each, or None (nothing held). Devices another job
    reserves are skipped. With `own`, n devices with every slot free and all their slot locks;
    else None, with n devices reserved in `reserved` (device -> its reservation lock; kept
    across calls, given back once the devices are taken)."""
    slots = jobs_per_gpu()
    reserved = {} if reserved is None else reserved
    with _allocating(folder):
        others = _reserved_by_others(folder, devices, reserved)
        free = {device: _free_slots(folder, device, slots) for device in devices if device not in others}
        try:
            held = {device: slots - len(fds) for device, fds in free.items()}
            if not own:
                open_ = [device for device in free if free[device]]
                if len(open_) < n:
                    return None
                chosen = sorted(open_, key=held.__getitem__)[:n]  # a stable sort: ties by device order
                return chosen, [free[device].pop(0) for device in chosen]
            idle = [device for device in free if held[device] == 0]
            if len(idle) >= n:
                chosen = sorted(idle, key=lambda d: d not in reserved)[:n]  # its reserved ones first
                fds = [fd for device in chosen for fd in free.pop(device)]
                for fd in reserved.values():
                    os.close(fd)
                reserved.clear()
                return chosen, fds
            if len(reserved) < n and len(free) >= n:  # reserve n devices, all at once or none
                order = sorted(free, key=lambda d: (d not in reserved, held[d]))[:n]
                for device in order:
                    if device not in reserved:
                        fd = _try_lock(_reservation_path(folder, device))
                        if fd is not None:
                            reserved[device] = fd
                if len(reserved) < n:  # lost a race outside the allocation lock: none kept
                    for fd in reserved.values():
                        os.close(fd)
                    reserved.clear()
            return None
        finally:
            for probes in free.values():  # every free slot not claimed is given back
                for fd in probes:
                    os.close(fd)


@contextlib.contextmanager
def claim(n: int, poll_seconds: float = 2.0, own: bool = False):
    """Hold n GPUs for the block: CUDA_VISIBLE_DEVICES names them (empty for n = 0); with
    `own`, every slot of each, and $BOUNDARY_JOBS_PER_GPU is 1 inside the block.

    Waits, saying so once, while other jobs hold too many devices (Snakemake runs more GPU
    jobs than there are devices unless given `--resources gpu=<count>`)."""
    if n < 0:
        raise BoundaryError(f"--gpus: {n} is not a GPU count")
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    slots_before = os.environ.get(SLOTS_ENV)
    fds: list[int] = []
    try:
        if n == 0:
            chosen = []
        else:
            devices = visible()
            if len(devices) < n:
                raise BoundaryError(f"--gpus {n}: this job sees {describe(devices)}")
            if os.environ.get("SLURM_JOB_ID"):  # the scheduler chose them for this job alone
                chosen = devices[:n]
            else:
                chosen, fds = _wait_for(devices, n, poll_seconds, own)
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
        if own:
            os.environ[SLOTS_ENV] = "1"
        yield chosen
    finally:
        for fd in fds:
            os.close(fd)
        for name, value in (("CUDA_VISIBLE_DEVICES", before), (SLOTS_ENV, slots_before)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _wait_for(devices: list[str], n: int, poll_seconds: float,
              own: bool = False) -> tuple[list[str], list[int]]:
    folder = lock_dir()
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):
            folder.chmod(0o1777)  # shared by every user's jobs on this machine
    reserved: dict[str, int] = {}
    try:
        taken, said = _take(devices, n, folder, own, reserved), False
        while taken is None:
            if not said:
                what = (f"{n} whole device(s), no other job on them," if own else f"{n}")
                print(f"gpus: waiting for {what} of {describe(devices)}: the others are held by "
                      f"other jobs (locks in {folder})", file=sys.stderr, flush=True)
                said = True
            time.sleep(poll_seconds)
            taken = _take(devices, n, folder, own, reserved)
        return taken
    finally:
        for fd in reserved.values():
            os.close(fd)
