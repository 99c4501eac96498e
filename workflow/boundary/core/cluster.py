"""`boundary cluster-check`: name every rule a SLURM cluster can never schedule, before a run.

SLURM accepts a job that asks for more CPUs, memory or GPUs than any node of its partition
has, or a longer run time than the partition allows, and leaves it PENDING for ever; Snakemake
then waits without a word. This check reads what each job would ask for from a dry run with
the same profile and config (so the profile's and the config's settings both count), reads
the partitions and nodes from `scontrol`, and prints one line per rule that cannot run.

    boundary cluster-check --profile config/profiles/slurm [--configfile config/paper.yaml]
                           [--all] [other snakemake arguments, e.g. targets]
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser, description

SNAKEFILE = Path(__file__).resolve().parents[3] / "Snakefile"
UNLIMITED = float("inf")


@dataclass(frozen=True)
class Request:
    """What one job asks SLURM for (what the executor plugin turns into sbatch flags)."""

    rule: str
    cpus: int
    mem_mb: int
    gpus: int
    runtime: float  # minutes
    partition: str  # "" for the cluster's default
    account: str

    def needs(self) -> str:
        return f"{f'{self.gpus} GPUs, ' if self.gpus else ''}{self.cpus} CPUs, {self.mem_mb} MB"

    def describe(self) -> str:
        return f"{self.needs()}, {self.runtime:g} min on {self.partition or 'the default partition'}"


# --- what the jobs ask for -------------------------------------------------------------------

def _fields(text: str) -> dict[str, str]:
    """`k=v, k2=v2` (a dry run's resources line; values may hold commas) or `k=v k2=v2`
    (scontrol -o) into a dict."""
    return {m.group(1): m.group(2).strip().rstrip(",")
            for m in re.finditer(r"(\w+)=(.*?)(?=(?:,\s*|\s+)\w+=|$)", text.strip())}


def requests_from_dry_run(text: str) -> list[Request]:
    """Every job of a Snakemake dry run (`snakemake -n`) with its SLURM request."""
    jobs, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            current = {"rule": m.group(1), "local": line.startswith("local"), "threads": 1, "resources": {}}
            jobs.append(current)
        elif current and line.startswith("threads:"):
            current["threads"] = int(line.split(":", 1)[1])
        elif current and line.startswith("resources:"):
            current["resources"] = _fields(line.split(":", 1)[1])
    out = []
    for job in jobs:
        res = job["resources"]
        if job["local"] or job["rule"] == "all":  # runs in the Snakemake process, not SLURM
            continue
        cpus = int(res.get("cpus_per_task", job["threads"]))
        mem = int(res["mem_mb"]) if res.get("mem_mb", "").isdigit() else 0
        if res.get("mem_mb_per_cpu", "").isdigit():
            mem = int(res["mem_mb_per_cpu"]) * cpus
        gpus = int(res["gpu"]) if res.get("gpu", "").isdigit() else _gres_gpus(res.get("gres", ""))
        runtime = parse_minutes(res["runtime"]) if res.get("runtime") else 0
        out.append(Request(job["rule"], max(cpus, 1), mem, gpus, runtime,
                           res.get("slurm_partition", ""), res.get("slurm_account", "")))
    return out


def _gres_gpus(gres: str) -> int:
    """GPUs in a gres string: `gpu:8`, `gpu:h100:8(S:0-1)`, `gpu:h100:4,shard:8` -> 8, 8, 4."""
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == "gpu":
            total += int(parts[-1]) if parts[-1].isdigit() else 1
    return total


def parse_minutes(value: str) -> float:
    """A SLURM or Snakemake time in minutes: UNLIMITED, `30`, `1:30:00`, `2-12`, `2-12:30:00`."""
    value = str(value).strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return UNLIMITED
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(p) for p in value.split(":")] + [0, 0]
        return days * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60
    parts = [float(p) for p in value.split(":")]
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:  # minutes:seconds
        return parts[0] + parts[1] / 60
    return parts[0] * 60 + parts[1] + parts[2] / 60


# --- what the cluster has --------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: int
    partitions: tuple[str, ...]
    state: str

    @property
    def usable(self) -> bool:  # DOWN, DRAIN(ED/ING), FAIL never start a job until an admin acts
        return not re.search(r"DOWN|DRAIN|FAIL|NOT_RESPONDING|FUTURE", self.state)


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    state: str
    max_time: float
    max_cpus_per_node: float
    max_mem_per_node: float
    max_mem_per_cpu: float
    allow_accounts: tuple[str, ...]  # ("ALL",) for any
    deny_accounts: tuple[str, ...]


def _limit(value: str | None) -> float:
    return UNLIMITED if value in (None, "", "UNLIMITED", "0") else float(value)


def parse_partitions(text: str) -> dict[str, Partition]:
    """`scontrol show partition -o`: one partition per line."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        f = _fields(line)
        mem_per_node = f.get("MaxMemPerNode")
        mem_per_cpu = f.get("MaxMemPerCPU")
        out[f["PartitionName"]] = Partition(
            name=f["PartitionName"], default=f.get("Default") == "YES", state=f.get("State", "UP"),
            max_time=parse_minutes(f.get("MaxTime", "UNLIMITED")),
            max_cpus_per_node=_limit(f.get("MaxCPUsPerNode")),
            max_mem_per_node=_limit(mem_per_node),
            max_mem_per_cpu=_limit(mem_per_cpu),
            allow_accounts=tuple(f.get("AllowAccounts", "ALL").split(",")),
            deny_accounts=tuple(a for a in f.get("DenyAccounts", "").split(",") if a and a != "(null)"))
    return out


def parse_nodes(text: str) -> list[Node]:
    """`scontrol show node -o`: one node per line."""
    out = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        f = _fields(line)
        cpus = int(f.get("CPUEfctv") or f.get("CPUTot") or 0)
        mem = int(f.get("RealMemory") or 0) - int(f.get("MemSpecLimit") or 0)
        gres = "" if f.get("Gres") in (None, "(null)") else f["Gres"]
        out.append(Node(f["NodeName"], cpus, mem, _gres_gpus(gres),
                        tuple(f.get("Partitions", "").split(",")), f.get("State", "")))
    return out


# --- the check -------------------------------------------------------------------------------

def problem(req: Request, partitions: dict[str, Partition], nodes: list[Node]) -> str | None:
    """Why SLURM can never start this request, or None."""
    if req.partition:
        part = partitions.get(req.partition)
        if part is None:
            return f"partition {req.partition!r} does not exist (partitions: {', '.join(sorted(partitions))})"
    else:
        defaults = [p for p in partitions.values() if p.default]
        if not defaults:
            return "no partition set and the cluster has no default partition: set slurm.cpu_partition " \
                   "and slurm.gpu_partition in the profile"
        part = defaults[0]
    if part.state != "UP":
        return f"partition {part.name} is {part.state}"
    if req.runtime > part.max_time:
        return f"runtime {req.runtime:g} min is over the MaxTime of partition {part.name} ({part.max_time:g} min)"
    if req.account:
        if "ALL" not in part.allow_accounts and req.account not in part.allow_accounts:
            return f"account {req.account!r} may not use partition {part.name} (AllowAccounts={','.join(part.allow_accounts)})"
        if req.account in part.deny_accounts:
            return f"account {req.account!r} is denied partition {part.name}"
    if req.cpus > part.max_cpus_per_node:
        return f"{req.cpus} CPUs is over partition {part.name}'s MaxCPUsPerNode ({part.max_cpus_per_node:g})"
    if req.mem_mb > min(part.max_mem_per_node, part.max_mem_per_cpu * req.cpus):
        return f"{req.mem_mb} MB is over partition {part.name}'s memory limit per node"
    members = [n for n in nodes if part.name in n.partitions]
    fits = [n for n in members if n.cpus >= req.cpus and n.mem_mb >= req.mem_mb and n.gpus >= req.gpus]
    if not fits:
        if not members:
            return f"partition {part.name} has no nodes"
        largest = f"{max(n.gpus for n in members)} GPUs, {max(n.cpus for n in members)} CPUs, " \
                  f"{max(n.mem_mb for n in members)} MB"
        return f"no node of partition {part.name} has {req.needs()} (largest: {largest})"
    if not any(n.usable for n in fits):
        return f"every node of partition {part.name} that fits is {'/'.join(sorted({n.state for n in fits}))}"
    return None


def check(requests: list[Request], partitions: dict[str, Partition], nodes: list[Node]) -> list[str]:
    """One line per (rule, request) that can never run, naming the rule and its job count."""
    groups: dict[Request, int] = {}
    for req in requests:
        groups[req] = groups.get(req, 0) + 1
    lines = []
    for req, count in sorted(groups.items(), key=lambda item: item[0].rule):
        why = problem(req, partitions, nodes)
        if why:
            lines.append(f"rule {req.rule} ({count} job{'s' if count > 1 else ''}: {req.describe()}): {why}")
    return lines


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except FileNotFoundError:
        raise BoundaryError(f"{command[0]}: not found (is this a SLURM login node?)") from None
    if done.returncode:
        tail = done.stdout.strip().splitlines()[-12:]
        raise BoundaryError(f"{shlex.join(command)} failed:\n" + "\n".join(tail))
    return done.stdout


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary cluster-check", description=description(__doc__),
                            usage="%(prog)s --profile PROFILE [--configfile FILE] [--all] [snakemake arguments]",
                            epilog="example:\n  boundary cluster-check --profile config/profiles/slurm "
                                   "--configfile config/paper.yaml")
    parser.add_argument("--profile", required=True, help="the SLURM profile, e.g. config/profiles/slurm")
    parser.add_argument("--configfile", help="the workflow config (default: the embedded one)")
    parser.add_argument("--snakefile", default=str(SNAKEFILE), help="the workflow's Snakefile")
    parser.add_argument("--all", action="store_true",
                        help="every job of the workflow, not only those a run would start now")
    return parser


def main(argv=None):
    args, rest = make_parser().parse_known_args(argv)
    if not Path(args.profile).is_dir():
        raise BoundaryError(f"--profile: {args.profile}: no such profile folder")
    command = [sys.executable, "-m", "snakemake", "--snakefile", args.snakefile, "--profile",
               args.profile, "--dry-run", *rest]
    if args.all:
        command.append("--forceall")
    if args.configfile:
        command += ["--configfile", args.configfile]  # last: --configfile takes several values
    requests = requests_from_dry_run(_run(command))
    partitions = parse_partitions(_run(["scontrol", "show", "partition", "-o"]))
    nodes = parse_nodes(_run(["scontrol", "show", "node", "-o"]))
    lines = check(requests, partitions, nodes)
    rules = sorted({r.rule for r in requests})
    if lines:
        print("\n".join(lines))
        raise BoundaryError(f"{len(lines)} request(s) can never be scheduled on this cluster "
                            "(set resources: in the config, or the partitions in the profile)")
    print(f"cluster-check: {len(requests)} jobs of {len(rules)} rules fit this cluster "
          f"({len(partitions)} partitions, {len(nodes)} nodes)")
