"""Base models as researchers hold them, made into one plain folder that every stage loads.

A source is a save_pretrained folder, a hub id (downloaded unless offline mode is on: core/hub.py;
untested here) or a GGUF file.
`import_base` writes weights (safetensors), tokenizer with its chat template, and a generation
config whose `eos_token_id` lists every stop id; `load_model` reads that folder the one way
every stage does. GGUF weights are dequantised into a plain state dict: transformers keeps
them packed on CUDA (dequantising in every matmul) and 5.17 refuses to save a GGUF-loaded
model. The GGUF tokenizer can report another eos than the file's metadata (5.17 gives SmolLM2
`<|im_start|>`), so the stop ids come from the metadata and the tokenizer's eos is set to the
first of them: TRL stops at the tokenizer's eos as well as the generation config's.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from pathlib import Path

from boundary.core.artifacts import atomic_dir, output_folder
from boundary.core.errors import BoundaryError, warn
from boundary.core.hub import why_not_fetched

OWNER = "boundary import-base"  # the marker of the folders it writes (core.artifacts.output_folder)
DDP_PREFIX = "module."  # what torch's DistributedDataParallel puts before every weight name
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _short(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"


def _gguf_eos_ids(path: Path) -> list[int]:
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get("tokenizer.ggml.eos_token_id")
    return [int(field.parts[field.data[0]][0])] if field is not None else []


@contextlib.contextmanager
def gguf_parsed_once():
    """One GGUFReader a file inside the block. transformers parses the file afresh for its config,
    its tokenizer and its weights (`from gguf import GGUFReader` at each call), and a parse of a
    151k-token vocabulary's metadata is about 10 s of Python: with the eos lookup, 4 parses were
    42 of the 0.5B import's 76 s. The reader is read-only (a memmap), so one serves every call.
    Likewise the tensor-name map: transformers builds it again for every submodule of the model
    (~400 builds of one map for SmolLM2, ~6 s); it is only read, so one a (arch, layers) serves."""
    import functools

    import gguf

    real, readers, real_names = gguf.GGUFReader, {}, gguf.get_tensor_name_map

    def shared(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = shared, functools.cache(real_names)
    try:
        yield readers
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real, real_names


def _load_source(source: str):
    """(model, tokenizer, extra stop ids) from a folder, a GGUF file or a hub id."""
    from transformers import AutoTokenizer

    path = Path(source)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise BoundaryError(f"{path}: GGUF file not found")
        kwargs = {"gguf_file": path.name}
        folder = str(path.parent)
        try:
            with gguf_parsed_once():
                extra = _gguf_eos_ids(path)
                tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
                model = from_pretrained(folder, **kwargs)
        except Exception as err:  # a GGUF transformers cannot read, whatever the cause
            raise BoundaryError(f"{path}: transformers cannot read this GGUF ({_short(err)})") from None
        return _dequantised(model), tokenizer, extra
    if path.exists():
        if not path.is_dir():
            raise BoundaryError(f"{path}: not a model folder or a .gguf file")
        if not any((path / name).exists() for name in TOKENIZER_FILES):
            raise BoundaryError(f"{path}: no tokenizer in the model folder "
                                f"(none of {', '.join(TOKENIZER_FILES)})")
        if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
            raise BoundaryError(f"{path}: no weights in the model folder (*.safetensors or *.bin)")
    try:  # a folder, or a hub id when the network allows it
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = from_pretrained(source, dtype="auto")
    except BoundaryError:
        raise
    except Exception as err:
        if not path.exists():  # a mistyped path looks like a hub id: say both
            raise BoundaryError(f"{source}: no such model folder or file, and as a hub id it was not fetched: "
                                f"{why_not_fetched()}") from None
        raise BoundaryError(f"{source}: cannot load the model ({_short(err)})") from None
    return model, tokenizer, []


def _weight_names(folder: Path) -> list[str]:
    """The weight names of a model folder, from its index or the files' headers (no tensors)."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            return list(json.loads((folder / index).read_text()).get("weight_map", {}))
    names = []
    for file in sorted(folder.glob("*.safetensors")):
        from safetensors import safe_open

        with safe_open(file, "pt") as weights:
            names += list(weights.keys())
    for file in [] if names else sorted(folder.glob("*.bin")):
        import torch

        names += list(torch.load(file, map_location="meta", weights_only=True, mmap=True))
    return names


def _first(keys) -> str:
    keys = sorted(k[0] if isinstance(k, tuple) else str(k) for k in keys)
    return ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")


def from_pretrained(source: str | Path, **kwargs):
    """AutoModelForCausalLM.from_pretrained with every weight accounted for, the one way a model
    is loaded. A folder saved from DDP (every weight name under `module.`) is read without the
    prefix, with a one-line warning; a weight the files lack (transformers would initialise it at
    random), one the model has no place for, or one of another shape is one line naming the
    folder and the first keys."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    path = Path(source)
    if path.is_dir() and "gguf_file" not in kwargs:
        names = _weight_names(path)
        if names and all(name.startswith(DDP_PREFIX) for name in names):
            warn(f"{source}: every weight name starts with {DDP_PREFIX!r} (saved from DDP); read without it")
            kwargs["key_mapping"] = {"^" + re.escape(DDP_PREFIX): ""}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report: the line below says what matters
    try:
        model, info = AutoModelForCausalLM.from_pretrained(source, output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    wrong = [f"{len(keys)} {what} ({_first(keys)})" for what, keys in (
        ("missing", info.get("missing_keys")), ("unexpected", info.get("unexpected_keys")),
        ("of another shape", info.get("mismatched_keys"))) if keys]
    if wrong:
        raise BoundaryError(f"{source}: the weights do not fit the model's config: " + "; ".join(wrong)
                            + " (missing ones would be initialised at random)")
    return model


def _dequantised(model):
    """A fresh model of the same config holding the dequantised weights, GGUF marks removed."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict())
    return plain


def kv_bytes(config, itemsize: int) -> int:
    """A token's keys and values over every layer: a text config's KV heads times head size,
    at `itemsize` bytes a value."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * itemsize


def stop_ids(generation_config, tokenizer=None) -> list[int]:
    """Every eos id of a generation config (int or list), the tokenizer's only as a fallback."""
    eos = generation_config.eos_token_id if generation_config is not None else None
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if not ids and tokenizer is not None and tokenizer.eos_token_id is not None:
        ids = [tokenizer.eos_token_id]
    return ids


def import_base(source: str, out: str | Path) -> dict:
    """Materialise `source` as a plain folder at `out` (atomically; a folder `out` that it did not
    write is refused, before loading); returns what it wrote."""
    output_folder(out, OWNER)
    model, tokenizer, extra = _load_source(source)
    generation = model.generation_config
    ids = list(dict.fromkeys(extra + stop_ids(generation, tokenizer)))
    if not ids:
        raise BoundaryError(f"{source}: no eos token id in the generation config or tokenizer")
    generation.eos_token_id = ids if len(ids) > 1 else ids[0]
    if tokenizer.eos_token_id not in ids:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(ids[0])
    if tokenizer.pad_token is None:  # batched sampling pads; eos is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    if generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id
    if not getattr(tokenizer, "chat_template", None):
        print(f"import-base: {source}: the tokenizer has no chat template (prompt.chat needs one)")
    with atomic_dir(out, OWNER) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    info = {"source": str(source), "model_type": model.config.model_type,
            "parameters": sum(p.numel() for p in model.parameters()), "dtype": str(model.dtype),
            "eos_token_id": ids, "eos_token": tokenizer.eos_token,
            "chat_template": bool(getattr(tokenizer, "chat_template", None))}
    print("import-base: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    return info


@functools.lru_cache(maxsize=2)
def load_model(path: str, device: str | None = None, base: str | None = None):
    """(model, tokenizer) from an imported folder, or from a LoRA adapter folder and its `base`
    (merged: `merged_model`): bf16 on a GPU, fp32 on CPU, eval mode, no gradients, left padding.
    Cached: a stage that samples one model several times loads it once."""
    import torch
    from transformers import AutoTokenizer

    if not Path(path).is_dir():
        raise BoundaryError(f"{path}: no such model folder")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    if is_adapter(path):
        model = merged_model(path, _needs_base(path, base), dtype)
    else:
        model = from_pretrained(path, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder(path, base))
    tokenizer.padding_side = "left"
    # Frozen, as the trainer holds its base: parameters without grad take other CPU matmul
    # kernels. Stage and trainer get bit-identical log-probs only when both load the base from
    # this folder (the same memory alignment) at equal thread counts: MKL promises no more.
    return model.to(device).eval().requires_grad_(False), tokenizer


# LoRA policies. With train.lora on, a policy folder is peft's save_pretrained of the adapter
# (adapter_config.json, adapter_model.safetensors) and the tokenizer, and the base is the run's
# models/base folder. Sampling merges the adapter into the base once: the merge is computed in
# fp32 and cast once to the dtype sampled in, so the merged weights are the nearest values of that
# dtype to base + adapter (peft's own merge into a bf16 base adds a bf16-rounded delta: two
# roundings). The hf sampler, the vLLM engine (which loads the merged folder, `merged_folder`)
# and its teacher-forced entropy pass thus sample one set of weights, and `boundary export`
# writes that set.

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MERGED_OWNER = "boundary export"  # the marker of the merged folders it writes


def is_adapter(folder: str | Path) -> bool:
    """Whether `folder` holds a peft adapter (an adapter_config.json) rather than a model."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def _needs_base(adapter: str | Path, base: str | Path | None) -> str:
    if base is None:
        raise BoundaryError(f"{adapter}: a LoRA adapter folder: it is sampled on its base model "
                            "(give the base folder, --base)")
    return str(base)


def tokenizer_folder(folder: str | Path, base: str | Path | None = None) -> str:
    """Where a model or adapter folder's tokenizer is: the folder itself (the trainer saves it
    beside an adapter), else the base's."""
    own = base is None or any((Path(folder) / name).exists() for name in TOKENIZER_FILES)
    return str(folder if own else base)


def _meta_policy(adapter: Path, base: Path):
    """The base's architecture with the adapter's layers injected, on the meta device (no
    memory, no weights read): what the adapter's files must fill. A target module the base
    lacks is one line (peft itself refuses only when none is there)."""
    import torch
    from peft import PeftConfig, PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = PeftConfig.from_pretrained(str(adapter))
    except Exception as err:
        raise BoundaryError(f"{adapter}: cannot read {ADAPTER_CONFIG} ({_short(err)})") from None
    if config.peft_type != "LORA":
        raise BoundaryError(f"{adapter}: a {config.peft_type} adapter; only LoRA adapters are read")
    try:
        base_config = AutoConfig.from_pretrained(str(base))
    except Exception as err:
        raise BoundaryError(f"{base}: not a model folder ({_short(err)})") from None
    unfit = f"{adapter}: does not fit the base model {base}"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(base_config)
        names = [name for name, _ in model.named_modules()]
        if not isinstance(config.target_modules, str):  # names, as peft matches them (a string is a regex)
            absent = [t for t in sorted(config.target_modules or [])
                      if not any(n == t or n.endswith("." + t) for n in names)]
            if absent:
                raise BoundaryError(f"{unfit}: {len(absent)} target module(s) of {ADAPTER_CONFIG} not in "
                                    f"the base ({_first(absent)})")
        try:
            return PeftModel(model, config)
        except Exception as err:  # peft's own refusals (its regex matches nothing, ...)
            raise BoundaryError(f"{unfit}: {_short(err)}") from None


def check_adapter(adapter: str | Path, base: str | Path) -> None:
    """Refuse, in one line naming the adapter folder, an adapter that does not fit the base: a
    target module the base lacks, weights the base has no place for or leaves unfilled, or a
    shape of another hidden size. Checked on the meta device and the files' headers, before
    any weight is loaded."""
    from peft import get_peft_model_state_dict
    from safetensors import safe_open

    adapter, base = Path(adapter), Path(base)
    if not (adapter / ADAPTER_WEIGHTS).is_file():
        raise BoundaryError(f"{adapter}: no {ADAPTER_WEIGHTS} in the adapter folder")
    policy = _meta_policy(adapter, base)
    expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(policy).items()}
    with safe_open(str(adapter / ADAPTER_WEIGHTS), "pt") as weights:
        found = {k: tuple(weights.get_slice(k).get_shape()) for k in weights.keys()}
    both = sorted(set(found) & set(expected))
    wrong = [f"{len(keys)} {what} ({_first(keys)})" for what, keys in (
        ("missing", sorted(set(expected) - set(found))),
        ("the base has no place for", sorted(set(found) - set(expected))),
        ("of another shape", [f"{k} {list(found[k])}, the base's {list(expected[k])}"
                              for k in both if found[k] != expected[k]])) if keys]
    if wrong:
        raise BoundaryError(f"{adapter}: does not fit the base model {base}: adapter weights " + "; ".join(wrong))


def merged_model(adapter: str | Path, base: str | Path, dtype=None):
    """The base with the adapter merged in: checked (`check_adapter`), loaded in fp32, merged
    by peft in fp32, then cast once to `dtype` (None: the dtype the base folder was saved in)."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig

    check_adapter(adapter, base)
    model = from_pretrained(base, dtype=torch.float32)
    try:
        policy = PeftModel.from_pretrained(model, str(adapter))
        model = policy.merge_and_unload()
    except Exception as err:  # what the header check cannot see (a corrupt tensor, a peft refusal)
        raise BoundaryError(f"{adapter}: cannot apply the adapter to {base} ({_short(err)})") from None
    dtype = dtype or AutoConfig.from_pretrained(str(base)).dtype or torch.float32
    return model.to(dtype)


def write_merged(adapter: str | Path, base: str | Path, folder: str | Path, dtype=None) -> dict:
    """Write the merged model (`merged_model`) and the adapter's tokenizer to the existing empty
    `folder` as a plain model folder (what every stage and transformers load); returns what it
    wrote."""
    from transformers import AutoTokenizer

    model = merged_model(adapter, base, dtype)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_folder(adapter, base)).save_pretrained(folder)
    return {"adapter": str(adapter), "base": str(base), "model_type": model.config.model_type,
            "parameters": sum(p.numel() for p in model.parameters()), "dtype": str(model.dtype)}


def export(adapter: str | Path, base: str | Path, out: str | Path) -> dict:
    """`boundary export`: base + adapter merged into a plain model folder at `out`, written
    atomically (a folder `out` it did not write is refused before anything loads)."""
    output_folder(out, MERGED_OWNER)
    if not is_adapter(adapter):
        raise BoundaryError(f"{adapter}: not a LoRA adapter folder (no {ADAPTER_CONFIG})")
    with atomic_dir(out, MERGED_OWNER) as tmp:
        info = write_merged(adapter, base, tmp)
    return info


@contextlib.contextmanager
def merged_folder(adapter: str | Path, base: str | Path, dtype=None):
    """A temporary plain folder holding base + adapter merged (in $TMPDIR: it takes the model's
    size in `dtype`), removed when the block ends: for engines that load a folder (vLLM)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="boundary-merged-") as tmp:
        write_merged(adapter, _needs_base(adapter, base), tmp, dtype)
        yield tmp
