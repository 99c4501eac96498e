"""lab/lease/device_kit.py on a stand-in index of tiny wheels (no network): the closure
leaves out what the device image has, follows extras and markers for CPython 3.12 on Linux,
backtracks a package whose newest version asks for more than an earlier choice gives, and
refuses a root it cannot meet in one line; vLLM's parts join to its wheel less what is stripped."""

from __future__ import annotations

import importlib.util
import io
import lzma
import os
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location("device_kit", ROOT / "lab" / "lease" / "device_kit.py")
kit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kit)


def wheel(folder: Path, name: str, version: str, requires=(), files=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
        for member, data in (files or {}).items():
            z.writestr(member, data)
    return path


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A folder of wheels standing in for PyPI: `download` takes the newest that meets the
    requirement, `versions` lists them newest first."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    store = tmp_path / "index"

    def listed(name):
        found = [p for p in store.glob("*.whl")
                 if canonicalize_name(p.name.split("-")[0]) == canonicalize_name(name)]
        return sorted(found, key=lambda p: Version(p.name.split("-")[1]), reverse=True)

    def download(requirement, dest, deps=False, find_links=None):
        req = Requirement(requirement)
        match = [p for p in listed(req.name) if Version(p.name.split("-")[1]) in req.specifier]
        if not match:
            raise kit.KitError(f"pip download {requirement}: ERROR: No matching distribution found")
        shutil.copy(match[0], dest)

    monkeypatch.setattr(kit, "download", download)
    monkeypatch.setattr(kit, "versions", lambda name: [Version(p.name.split("-")[1]) for p in listed(name)])
    return store


def test_the_closure_skips_the_image_and_follows_extras_and_markers(index, tmp_path):
    wheel(index, "app", "1.0", ["lib>=2", "torch", "extra-lib; extra == 'fast'", "winlib; sys_platform == 'win32'",
                                "old; python_version < '3.10'"])
    wheel(index, "lib", "2.5", ["leaf[speed]"])
    wheel(index, "lib", "1.0")
    wheel(index, "leaf", "0.3", ["speedup; extra == 'speed'"])
    wheel(index, "speedup", "1.1")
    out = tmp_path / "out"
    out.mkdir()
    chosen = kit.closure(["app"], out)
    assert {name: str(v) for name, v in chosen.items()} == {"app": "1.0", "lib": "2.5", "leaf": "0.3",
                                                           "speedup": "1.1"}
    assert sorted(p.name.split("-")[0] for p in out.glob("*.whl")) == ["app", "leaf", "lib", "speedup"]


def test_a_package_asking_more_than_an_earlier_choice_gives_goes_back_to_an_older_version(index, tmp_path):
    """vLLM pins apache-tvm-ffi==0.1.10 and xgrammar's newest asks for >=0.1.11: xgrammar goes
    back to its newest release that asks for >=0.1.9 (here 0.2.7), as pip's resolver would."""
    wheel(index, "apache-tvm-ffi", "0.1.10")
    wheel(index, "apache-tvm-ffi", "0.1.11")
    wheel(index, "xgrammar", "0.2.9", ["apache-tvm-ffi>=0.1.11"])
    wheel(index, "xgrammar", "0.2.8", ["apache-tvm-ffi>=0.1.11"])
    wheel(index, "xgrammar", "0.2.7", ["apache-tvm-ffi>=0.1.9", "pydantic"])
    wheel(index, "pydantic", "2.0")
    out = tmp_path / "out"
    out.mkdir()
    chosen = kit.closure(["apache-tvm-ffi==0.1.10", "xgrammar<1"], out)
    assert {name: str(v) for name, v in chosen.items()} == {"apache-tvm-ffi": "0.1.10", "xgrammar": "0.2.7",
                                                           "pydantic": "2.0"}
    assert sorted(p.name for p in out.glob("xgrammar-*")) == ["xgrammar-0.2.7-py3-none-any.whl"]


def test_roots_that_cannot_both_be_met_are_one_line(index, tmp_path, capsys):
    wheel(index, "lib", "1.0")
    wheel(index, "lib", "2.0")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(kit.KitError, match=r"^lib>=2 is not met by lib 1.0$"):
        kit.closure(["lib<2", "lib>=2"], out)


def test_vllm_s_parts_join_to_its_wheel_less_what_a_dense_model_on_hopper_never_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(kit, "PART_MIB", 1 / 64)  # parts of 16 KiB
    payload = {path: b"k" for path in kit.STRIP if path.endswith((".so", "vllm-rs"))}
    payload |= {f"{folder}/x.py": b"" for folder in kit.STRIP if not folder.endswith((".so", "vllm-rs"))}
    payload |= {"vllm/__init__.py": b"", "vllm/big.bin": os.urandom(40_000)}  # incompressible: 3 parts
    whl = wheel(tmp_path / "w", "vllm", "0.26.0", files=payload)
    parts = kit.make_vllm_parts(whl, tmp_path / "out")
    assert [f"{p.parent.name}/{p.name}" for p in parts] == [f"p{i + 1}/vllm_part_{i:02d}" for i in range(len(parts))]
    assert len(parts) > 1 and all(p.stat().st_size <= 16 * 1024 for p in parts)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(b"".join(p.read_bytes() for p in parts)))) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
        assert tar.extractfile("vllm/big.bin").read() == payload["vllm/big.bin"]
    assert names == {"vllm/__init__.py", "vllm/big.bin", "vllm-0.26.0.dist-info/METADATA"}
    missing = wheel(tmp_path / "m", "vllm", "0.26.0", files={"vllm/__init__.py": b""})
    with pytest.raises(kit.KitError, match=r"vllm_flash_attn/_vllm_fa2_C.abi3.so not found"):
        kit.make_vllm_parts(missing, tmp_path / "out2")
