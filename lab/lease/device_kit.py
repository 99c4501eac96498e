"""The wheels a GPU lease carries, made here from PyPI (the device has no network), into `.whl/`
(ignored). Run from the repository root:

    python lab/lease/device_kit.py [--out .whl] [--only smk,fidelity,deps,vllm,tests]

- `smk/`: Snakemake 9.27.1 and what it needs (pulp left out: lease.sh runs the greedy scheduler;
  connection_pool has no wheel on PyPI, so it is built here).
- `fidelity/`: what calibration, gate draws, regimes and masks need beyond the image: gguf,
  math-verify and jsonschema with their dependencies. A lease that trains nothing carries this.
- `deps/`: that, TRL and datasets, and the modules vLLM's offline engine imports beyond the image
  (found on an H100 by importing its engine, worker, model, attention and sampler modules with
  every other package blocked: lab/studies/2026-11-27-sampling-speed-h100/README.md), each with the
  dependencies of its wheel that the image lacks.
- `tests/`: what the product's whole test suite (tests/) needs beyond the image, `smk/` and `deps/`
  (made first: their wheels are left out, and their versions must meet the kit's requirements):
  pyproject's `test` extra less the linters (the suite runs none), its pins taken even where the
  image has the package (pytest-xdist: the image's may lack an option test.sh passes), for
  lab/lease/suite_on_device.sh.
- `p1/`, `p2/`, ...: vLLM 0.26.0's wheel without what a dense model on Hopper never loads (the
  FA2 kernels: vLLM picks FA3 there; the MoE kernels, vllm-rs, DeepGEMM, the SM100 attention),
  unpacked, tar'd, xz'd and cut in parts of PART_MIB, one folder a device call; lease.sh and
  engine_rollout_steps.sh unpack `/tmp/vllm_part_*` into their site folder.

Versions: a root's from this project's pins or vLLM's own requirement, a dependency's the newest
wheel that meets every requirement naming it; a requirement that the chosen version does not
meet is one error line. Packages the device image has (IMAGE, its package list as read on
2026-11-17) are never downloaded: `pip install --no-deps` into a site folder first on the path
would shadow them.
"""

from __future__ import annotations

import argparse
import email.parser
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

SNAKEMAKE, VLLM, PART_MIB = "9.27.1", "0.26.0", 40
PLATFORMS = ["manylinux1_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39))]
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
          *(f"--platform={p}" for p in PLATFORMS)]  # pip's flags for the device's interpreter
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}
FIDELITY = ["gguf", "math-verify==0.9.0", "jsonschema"]
TRAINING = ["trl==1.16.0", "datasets"]
ENGINE = ["pydantic", "msgspec", "pyzmq", "cbor2", "pybase64", "cachetools", "openai", "openai-harmony",
          "partial-json-parser", "mistral-common", "xgrammar", "apache-tvm-ffi", "llguidance", "fastapi",
          "starlette", "blake3"]
STRIP = ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/vllm-rs",
         "vllm/third_party/deep_gemm", "vllm/third_party/fmha_sm100"]
IMAGE = set(map(canonicalize_name, """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader
lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja
numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split()))


LINTERS = {"ruff", "snakefmt"}  # in the test extra for CI's lint step; no test runs them


class KitError(Exception):
    pass


def download(requirement: str, dest: Path, deps: bool = False, find_links: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", *TARGET, *([] if deps else ["--no-deps"]),
           *(["--find-links", str(find_links)] if find_links else []), "-d", str(dest), requirement]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
        raise KitError(f"pip download {requirement}: {errors[0] if errors else run.stderr.strip()[-300:]}")


def metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def needs(meta, extras=frozenset()) -> list[Requirement]:
    """The wheel's requirements on this platform and Python, with the extras asked for."""
    out = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**ENV, "extra": e}) for e in ("", *extras)):
            out.append(req)
    return out


def versions(name: str) -> list[Version]:
    """The versions PyPI has of `name` for this platform and Python, newest first."""
    run = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name, *TARGET],
                         capture_output=True, text=True)
    line = next((x for x in run.stdout.splitlines() if x.startswith("Available versions:")), "")
    return [Version(v) for v in line.split(":", 1)[-1].replace(",", " ").split()]


def fetch(requirement: str, dest: Path, replace: Path | None = None) -> tuple[Path, object]:
    """One wheel into `dest` (in place of `replace`), and its metadata."""
    with tempfile.TemporaryDirectory() as scratch:
        download(requirement, Path(scratch))
        wheel = next(Path(scratch).glob("*.whl"))
        if replace is not None:
            replace.unlink()
        shutil.move(wheel, dest / wheel.name)
    return dest / wheel.name, metadata(dest / wheel.name)


def closure(roots: list[str], dest: Path, skip: set[str] = IMAGE,
            have: dict[str, Version] | None = None) -> dict[str, Version]:
    """Each root and each dependency not in `skip` (the image) nor `have` (another kit's wheels:
    name -> version, which must meet every requirement naming it), as wheels in `dest`: name ->
    version. A requirement that the version chosen earlier does not meet sends the package that
    states it back to its newest older version that asks for nothing the choice misses (pip's
    resolver backtracks likewise; it cannot run here, since it would also fetch what the image has)."""
    chosen, wheels, wants, have = {}, {}, {}, have or {}
    queue = [(Requirement(r), None) for r in roots]  # (requirement, the package stating it)
    while queue:
        req, parent = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in skip:
            continue
        if name in have:
            if have[name] not in req.specifier:
                raise KitError(f"{parent or 'the kit'} asks for {req}, not met by {name} {have[name]} "
                               "of the kit it goes with")
            continue
        wants.setdefault(name, []).append(req)
        if name in chosen:
            if chosen[name] in req.specifier:
                continue
            if parent is None:
                raise KitError(f"{req} is not met by {name} {chosen[name]}")
            older = [v for v in versions(parent) if v < chosen[parent]]
            for version in older[:15]:
                wheel, meta = fetch(f"{parent}=={version}", dest, replace=wheels[parent])
                wheels[parent], chosen[parent] = wheel, version
                if all(chosen[name] in r.specifier for r in needs(meta) if canonicalize_name(r.name) == name):
                    queue += [(r, parent) for r in needs(meta)]
                    break
            else:
                raise KitError(f"{parent} {chosen[parent]} asks for {req}, not met by {name} {chosen[name]}, "
                               f"nor by its 15 older versions")
            continue
        spec = ",".join(str(w.specifier) for w in wants[name] if str(w.specifier))
        wheels[name], meta = fetch(f"{name}{spec}", dest)
        chosen[name] = Version(meta["Version"])
        queue += [(r, name) for r in needs(meta, frozenset(req.extras))]
    return chosen


def vllm_spec(wheel: Path, name: str) -> str:
    """vLLM's own requirement on `name` (its version pins), else the bare name."""
    for req in needs(metadata(wheel)):
        if canonicalize_name(req.name) == canonicalize_name(name):
            return f"{name}{req.specifier}"
    return name


def make_vllm_parts(wheel: Path, out: Path) -> list[Path]:
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(scratch) / "site"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        for path in STRIP:
            target = site / path
            if not target.exists():
                raise KitError(f"{wheel.name}: {path} not found (another vLLM layout: check STRIP)")
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        packed = Path(scratch) / "vllm.tar.xz"
        with tarfile.open(packed, "w:xz", preset=6) as tar:
            for entry in sorted(site.iterdir()):
                tar.add(entry, arcname=entry.name)
        parts, size = [], int(PART_MIB * 2**20)
        with open(packed, "rb") as f:
            while chunk := f.read(size):
                folder = out / f"p{len(parts) + 1}"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                parts.append(folder / f"vllm_part_{len(parts):02d}")
                parts[-1].write_bytes(chunk)
    return parts


def test_roots(pyproject: Path = Path("pyproject.toml")) -> list[str]:
    """pyproject's `test` extra less the linters."""
    import tomllib

    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["test"]
    return [r for r in extra if canonicalize_name(Requirement(r).name) not in LINTERS]


def wheel_versions(*folders: Path) -> dict[str, Version]:
    """name -> version of the wheels in `folders` (from their file names)."""
    out = {}
    for folder in folders:
        for wheel in folder.glob("*.whl"):
            name, version = wheel.name.split("-")[:2]
            out[canonicalize_name(name)] = Version(version)
    return out


def check_install(folder: Path) -> None:
    """pip's own check that the wheels install together for the device's interpreter (no two
    versions of a package, each wheel's tags taken), as lease.sh installs them, without installing."""
    with tempfile.TemporaryDirectory() as target:
        run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-index", "--no-deps",
                              "--target", target, *TARGET, *map(str, sorted(folder.glob("*.whl")))],
                             capture_output=True, text=True)
    if run.returncode:
        errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
        raise KitError(f"{folder}: pip would not install these wheels together: "
                       f"{errors[0] if errors else run.stderr.strip()[-300:]}")


def mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".whl")
    ap.add_argument("--only", default="smk,fidelity,deps,vllm,tests")
    args = ap.parse_args(argv)
    out, only = Path(args.out), set(args.only.split(","))
    try:
        with tempfile.TemporaryDirectory() as scratch:
            scratch = Path(scratch)
            if "smk" in only:
                subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "connection_pool==0.0.3",
                                "-w", str(scratch / "smk")], check=True, capture_output=True)
                download(f"snakemake=={SNAKEMAKE}", scratch / "smk", deps=True, find_links=scratch / "smk")
                shutil.rmtree(out / "smk", ignore_errors=True)
                (out / "smk").mkdir(parents=True)
                for wheel in (scratch / "smk").glob("*.whl"):
                    if not wheel.name.startswith("pulp-"):
                        shutil.copy(wheel, out / "smk")
                print(f"device_kit: {out}/smk: {len(list((out / 'smk').glob('*.whl')))} wheels, "
                      f"{mib(out / 'smk'):.1f} MiB")
            if only & {"deps", "vllm"}:
                download(f"vllm=={VLLM}", scratch / "vllm")
                vllm = next((scratch / "vllm").glob("*.whl"))
            for kit, roots in (("fidelity", FIDELITY), ("deps", None)):
                if kit not in only:
                    continue
                if roots is None:
                    roots = FIDELITY + TRAINING + [vllm_spec(vllm, name) for name in ENGINE]
                shutil.rmtree(out / kit, ignore_errors=True)
                (out / kit).mkdir(parents=True)
                chosen = closure(roots, out / kit)
                print(f"device_kit: {out}/{kit}: {len(chosen)} wheels, {mib(out / kit):.1f} MiB: "
                      + " ".join(f"{n}=={v}" for n, v in sorted(chosen.items())))
            if "tests" in only:
                missing = [f"{out}/{k}" for k in ("smk", "deps") if not list((out / k).glob("*.whl"))]
                if missing:
                    raise KitError(f"the tests kit goes with {' and '.join(missing)}: make them first "
                                   "(--only smk,deps)")
                roots = test_roots()
                pinned = {canonicalize_name(Requirement(r).name) for r in roots if Requirement(r).specifier}
                shutil.rmtree(out / "tests", ignore_errors=True)
                (out / "tests").mkdir(parents=True)
                chosen = closure(roots, out / "tests", skip=IMAGE - pinned, have=wheel_versions(out / "smk", out / "deps"))
                check_install(out / "tests")
                print(f"device_kit: {out}/tests: {len(chosen)} wheels, {mib(out / 'tests'):.2f} MiB: "
                      + " ".join(f"{n}=={v}" for n, v in sorted(chosen.items())))
            if "vllm" in only:
                parts = make_vllm_parts(vllm, out)
                print(f"device_kit: vLLM {VLLM} in {len(parts)} part(s): "
                      + ", ".join(f"{p.parent}/{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in parts))
    except (KitError, subprocess.CalledProcessError, StopIteration) as err:
        sys.exit(f"device_kit: {err}")


if __name__ == "__main__":
    main()
