"""Warm parents for the test pipelines' `boundary` jobs and their `snakemake` runs: their imports
paid once, not once a process.

A Snakemake job of a test pipeline runs `boundary <stage>` on a tiny model, and almost all of its
CPU time is the process start: torch, transformers' model classes and the package, about 8
CPU-seconds, before 0.1 of sampling (tests/README.md). Here one server process a test worker
imports them once and forks a child for each job. The job's `boundary` on PATH is
`zygote_bin/boundary`, a client that hands the server its argument list, working directory,
environment and standard streams (the descriptors themselves, over a Unix socket) and then
stands in for the child: it forwards the signals it gets (SIGTERM's stop at a step boundary
included) and exits with the child's status, or dies of the child's signal. The child runs the
same `boundary.cli.main` as the installed entry point, in a process of its own: nothing a job
does reaches the server or the next job.

What a forked job cannot match, it does not try: an environment variable that the imported
libraries read when they load (HF_*, TORCH*, OMP_*, ... below) and that differs from the
server's makes the client run the installed `boundary` instead, and so does any failure to
reach the server. What the fork does not test is the entry point's own start (the installed
script, a cold import), which the tests that start `boundary` as a real process keep (the SLURM
run, the README's commands, the kill tests, the CLI's own tests). Snakemake's benchmark files of
a forked job measure the client, not the job: no test of a pipeline here reads their figures.

Snakemake itself, as `test_workflow.snakemake` runs it, forks the same way from a second server
that has imported Snakemake, its plugins and the third-party packages the workflow's parse
imports (about 2.5 of a dry run's 4.7 CPU-seconds), and nothing of this package: the smoke run
parses its own edited copy of the workflow, which must be what its Snakemake imports. The tests
whose point is Snakemake's own process (`kill -9` of the controller, the SLURM run) start it
themselves.

    job_env()          the variables that route a test pipeline's `snakemake` and its jobs here (the
                       servers start on first use, one of each a test process; {} where
                       BOUNDARY_TEST_ZYGOTE=0 or they fail)
    pipeline_env()     the session's environment as it began, with job_env's on top
    python tests/zygote.py SOCKET [KIND]     a server (job_env starts them; KIND: boundary, snakemake)
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT_DIR = HERE / "zygote_bin"
# Variables a library reads at import (threads, caches, offline flags, hash seed, allocators):
# a job whose value differs from the server's runs as a real process.
IMPORT_TIME = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_", "CUDA_", "NVIDIA_", "OMP_",
               "MKL_", "OPENBLAS_", "GOTO", "KMP_", "TOKENIZERS_", "PYTHON", "VLLM_", "NUMEXPR_", "LD_",
               "ARROW_", "XDG_", "HOME", "BOUNDARY_SEAT_ATTENTION")  # the package's one (sampling/hf.py)
THREADS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
           "NUMEXPR_NUM_THREADS")
OWN = ("BOUNDARY_ZYGOTE", "BOUNDARY_ZYGOTE_REAL", "BOUNDARY_ZYGOTE_SNAKEMAKE", "BOUNDARY_ZYGOTE_SNAKEMAKE_REAL",
       "BOUNDARY_ZYGOTE_ENTRY", "BOUNDARY_ZYGOTE_LOG", "BOUNDARY_TEST_ZYGOTE")
HEADER = struct.Struct("!I")
# The commands that fork from a server of their own (zygote_bin/ holds a client for each), and
# the installed entry point each child runs.
KINDS = {"boundary": "boundary.cli:main", "snakemake": "snakemake.cli:main"}


def socket_variable(kind: str) -> str:
    """The variable that names a kind's socket; its installed command's is this + "_REAL"."""
    return "BOUNDARY_ZYGOTE" if kind == "boundary" else f"BOUNDARY_ZYGOTE_{kind.upper()}"


def import_time_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in OWN}


# ---- the test side -------------------------------------------------------------------------

_server: dict = {}


def job_env() -> dict:
    """PATH and the sockets for a test pipeline's Snakemake: it and its `boundary` jobs fork from
    this process's servers (started now if they are not running). {} (real processes) where
    BOUNDARY_TEST_ZYGOTE=0, or where a server does not start, which it says in one line."""
    if os.environ.get("BOUNDARY_TEST_ZYGOTE") == "0" or sys.platform != "linux":
        return {}
    if not _server:
        _server["env"] = {}
        reals = {kind: shutil.which(kind) for kind in KINDS}
        if None in reals.values():
            return {}
        folder = Path(tempfile.mkdtemp(prefix="boundary-zygote-"))
        # The test configs' jobs run on one thread, and Snakemake says so to each job in these
        # variables (its shell.py): the servers load their libraries under the same values.
        base = start_env()
        env = {**base, **dict.fromkeys(THREADS, base.get("OMP_NUM_THREADS", "1"))}
        servers = {kind: subprocess.Popen([sys.executable, str(HERE / "zygote.py"), str(folder / kind), kind],
                                          env=env, stdout=subprocess.PIPE, text=True) for kind in KINDS}
        routes = {}
        for kind, proc in servers.items():
            atexit.register(_stop, proc)
            ready = proc.stdout.readline().strip()
            if ready != "ready":
                print(f"tests/zygote.py: the {kind} server did not start ({ready!r}): the pipelines run as real "
                      "processes", file=sys.stderr)
                return {}
            routes |= {socket_variable(kind): str(folder / kind), f"{socket_variable(kind)}_REAL": reals[kind]}
        atexit.register(shutil.rmtree, folder, True)
        _server["started"] = env
        _server["env"] = {"PATH": f"{CLIENT_DIR}{os.pathsep}{base['PATH']}", **routes,
                          **{k: env[k] for k in THREADS}}
    return dict(_server["env"])


def pipeline_env() -> dict:
    """A test pipeline's Snakemake environment: the session's as it began, with job_env's routes
    (the session's alone where the servers are off)."""
    return {**start_env(), **job_env()}


def start_env() -> dict:
    """The test session's environment as it began (conftest.START_ENV), else this process's."""
    try:
        from conftest import START_ENV
    except ImportError:
        return dict(os.environ)
    return dict(START_ENV)


def server_env() -> dict:
    """The environment the server started in, with job_env's on top: a job's that forks."""
    jobs = job_env()
    return {**_server["started"], **jobs} if jobs else {}


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


# ---- the server ----------------------------------------------------------------------------

def preload(kind: str = "boundary") -> None:
    """What a model stage imports before its work (tests/README.md: the start of a job), or a
    Snakemake start before it reads the workflow."""
    if kind == "snakemake":
        return preload_snakemake()
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import torch  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    import boundary.cli  # noqa: F401
    import boundary.sampling.hf  # noqa: F401
    import boundary.sampling.models  # noqa: F401
    import boundary.stages.evaluate  # noqa: F401
    import boundary.tasks.verify  # noqa: F401


def preload_snakemake() -> None:
    """Snakemake's CLI, its plugins (the argument parser asks each registry for them) and what
    the workflow's parse imports that is not this package (whose modules must come from the
    workflow the run parses: the smoke run's is an edited copy)."""
    import jsonschema  # noqa: F401
    import smart_open  # noqa: F401
    import snakemake.report.html_reporter  # noqa: F401
    import yaml  # noqa: F401
    from snakemake.cli import get_argument_parser

    get_argument_parser()


def serve(path: str, kind: str = "boundary") -> None:
    parent, before = os.getppid(), dict(os.environ)
    preload(kind)
    # What the imports made, out of the cyclic collector's reach (conftest.pytest_runtest_setup
    # says why): a job's gc.collect() (transformers', accelerate's, vLLM's) then walks its own objects
    # only, and touches none of the pages it shares with the server.
    gc.collect()
    gc.freeze()
    # What the imports set where it is unset (torch's inductor its cache folder, at
    # transformers' import): a job's real process would set it too, so a job without it is one
    # with it, and its child gets it.
    imported = {}
    if "torch" in sys.modules:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        imported["TORCHINDUCTOR_CACHE_DIR"] = default_cache_dir()
    baseline = import_time_env({**imported, **before})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    jobs: dict[socket.socket, int] = {}  # a client's connection -> its child
    while os.getppid() == parent:  # the test process gone: so is its server
        readable, _, _ = select.select([listener, *jobs], [], [], 0.05)
        for conn in readable:
            if conn is listener:
                client, _ = listener.accept()
                pid = start(client, listener, jobs, baseline, imported, kind)
                if pid:
                    jobs[client] = pid
                else:
                    client.close()
            elif not conn.recv(1):  # the client died (a kill -9): its job goes with it
                _kill(jobs.pop(conn))
                conn.close()
        for conn, pid in list(jobs.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                _send(conn, {"status": status})
                conn.close()
                del jobs[conn]


def _log(what: str, argv: list, env: dict, kind: str = "boundary") -> None:
    """The job's BOUNDARY_ZYGOTE_LOG (a file): one line a job, forked (its CPU-seconds) or real (why)."""
    if path := env.get("BOUNDARY_ZYGOTE_LOG"):
        with open(path, "a") as log:
            log.write(f"{what}: {kind} {' '.join(argv[:4])}\n")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _send(conn: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    try:
        conn.sendall(HEADER.pack(len(data)) + data)
    except OSError:
        pass


def read_message(stream) -> dict:
    """One length-prefixed JSON message from a binary stream (the client's side)."""
    head = stream.read(HEADER.size)
    body = stream.read(HEADER.unpack(head)[0]) if len(head) == HEADER.size else b""
    if len(head) < HEADER.size or len(body) < HEADER.unpack(head)[0]:
        raise ConnectionError("the server closed the connection")
    return json.loads(body)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, ancillary, _, _ = conn.recvmsg(HEADER.size, socket.CMSG_SPACE(3 * 4))
    fds = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    (size,) = HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the client closed its request")
        body += chunk
    return json.loads(body), fds


def start(conn: socket.socket, listener: socket.socket, jobs: dict, baseline: dict, imported: dict,
          kind: str = "boundary") -> int | None:
    """Fork the job a client asks for; its pid, or None when the client is told to run the real
    `boundary` (an import-time variable differs) or the request is broken."""
    try:
        request, fds = _receive(conn)
    except (OSError, ValueError, struct.error):
        return None
    # A job's environment without what the imports set is one they would set it in.
    differs = sorted(set(import_time_env({**imported, **request["env"]}).items()) ^ set(baseline.items()))
    if len(fds) != 3 or differs:
        for fd in fds:
            os.close(fd)
        reason = f"{differs[0][0]} differs" if differs else "no streams"
        _log(f"real ({reason})", request.get("argv", []), request.get("env", {}), kind)
        _send(conn, {"exec": reason})
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            listener.close()
            for other in jobs:
                other.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = run_job(request, imported, kind)
            # What the interpreter runs at exit (logging's flush among them), as in a real process.
            atexit._run_exitfuncs()
            usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            _log(f"forked {sum(u.ru_utime + u.ru_stime for u in usage):.1f} CPU-s, exit {code}", request["argv"],
                 os.environ, kind)
        except BaseException:  # as Python itself would: the traceback, status 1
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    return pid


def entry(name: str):
    """`module:function`, the job's main: the installed entry point's, or (test_zygote.py) a
    probe from this folder."""
    import importlib

    module, function = name.split(":")
    if name not in KINDS.values():
        sys.path.append(str(HERE))
    return getattr(importlib.import_module(module), function)


def run_job(request: dict, imported: dict, kind: str = "boundary") -> int:
    """The installed entry point's work (`boundary = "boundary.cli:main"`, `snakemake =
    "snakemake.cli:main"`), in the job's own directory and environment, with a fresh process's
    unseeded random state, argv and first import folder (the installed script's)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**imported, **request["env"]})
    tempfile.tempdir = None  # TMPDIR is the job's (Snakemake's tmpdir resource)
    for module in ("numpy.random", "torch"):  # `random` reseeds itself in a forked child
        if module in sys.modules:
            sys.modules[module].seed()
    script = request["env"].get(f"{socket_variable(kind)}_REAL") or kind
    sys.argv = [script, *request["argv"]]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    main = entry(request["env"].get("BOUNDARY_ZYGOTE_ENTRY", KINDS[kind]))

    try:
        code = main(request["argv"])
    except SystemExit as stop:
        code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(*sys.argv[1:3])
