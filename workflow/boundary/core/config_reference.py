"""docs/reference/config.md, written from the schema (workflow/schemas/config.schema.yaml).

Every key of every section, with its type, default and description, in the schema's order, so
the reference cannot disagree with what validation accepts. `tests/test_docs.py` renders it
again and compares it with the committed file. After a schema change:

    PYTHONPATH=workflow python -m boundary.core.config_reference    # rewrites the page
    PYTHONPATH=workflow python -m boundary.core.config_reference --check
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from boundary.core import schema as schema_module
from boundary.core.schema import PATH as SCHEMA_PATH

PAGE = SCHEMA_PATH.parents[2] / "docs" / "reference" / "config.md"
HEADER = """# Config reference

<!-- Generated from workflow/schemas/config.schema.yaml by
`PYTHONPATH=workflow python -m boundary.core.config_reference`; do not edit by hand. -->

Every key a config may hold, section by section, as `workflow/schemas/config.schema.yaml`
defines it. A key not listed here is refused in one line. **Default** is what validation
fills in when the key is absent; *required* keys have none, and a key with neither is unset
unless given (its description says what unset means). Every setting a stage reads is in its
rule's key, so changing it, or its default, reruns that stage ([explanation/keys.md](../explanation/keys.md)):
except *read only with* another setting's value (given otherwise, it is refused; not read,
it is in no key), and a feature's *off* value (its default: off, the feature is in no key).
`<name>` stands for a name you choose (letters, digits and `_`). How to write a config:
[how-to/write_a_config.md](../how-to/write_a_config.md).
"""


def comments(text: str) -> dict[tuple, str]:
    """The comment block written just above each key of the schema file, by the key's path
    (("properties", "train", "properties", "lr"), ...): the why behind keys that have no
    `description`. Lines inside a flow mapping `{...}` that spans lines are not keys."""
    out, stack, block, depth = {}, [], [], 0
    for line in text.splitlines():
        body = line.strip()
        if body.startswith("#"):
            block.append(body.lstrip("#").strip())
            continue
        if depth == 0 and body and not body.startswith("-") and ":" in body:
            indent = len(line) - len(line.lstrip())
            key = body.split(":", 1)[0].strip().strip('"')
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            if block:
                out[tuple(k for _, k in stack)] = " ".join(block)
        block = []
        code = line.split(" #", 1)[0]
        depth = max(0, depth + code.count("{") + code.count("[") - code.count("}") - code.count("]"))
    return out


def _value(v) -> str:
    return "`" + json.dumps(v, ensure_ascii=False) + "`"


def _kind(node: dict, root: dict) -> str:
    """The type in words: its JSON type(s), its allowed values or range."""
    node = schema_module.ref(node, root)
    if "enum" in node:
        return "one of " + ", ".join(_value(v) for v in node["enum"])
    if "const" in node:
        return _value(node["const"])
    for word in ("oneOf", "anyOf"):
        if word in node:
            return " or ".join(_kind(alt, root) for alt in node[word])
    types = node.get("type", "any")
    types = [types] if isinstance(types, str) else list(types)
    words = []
    for t in types:
        if t == "array":
            items = node.get("items", {})
            if isinstance(items, list):
                words.append("[" + ", ".join(_kind(i, root) for i in items) + "]")
            else:
                size = ""
                if node.get("minItems") is not None and node.get("minItems") == node.get("maxItems"):
                    size = f"{node['minItems']} "
                words.append(f"list of {size}{_kind(items, root) if items else 'values'}")
        elif t == "object" and "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
            words.append("map of `<name>`")
        else:
            words.append(t)
    text = " or ".join(words)
    bounds = [f"{op} {node[key]}" for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                    ("maximum", "<="), ("exclusiveMaximum", "<"))
              if key in node]
    if bounds:
        text += " " + " and ".join(bounds)
    return text


def _default(node: dict, required: bool) -> str:
    if "default" in node:
        return _value(node["default"])
    return "*required*" if required else ""


def _key_rule(node: dict) -> str:
    """What the key rule's annotations say of a key, in words, before its description."""
    words = []
    if "x-read-with" in node:
        words.append(f"*read only with {schema_module.read_with_text(node)}.*")
    if "x-off" in node:
        words.append(f"*Off at {_value(node['x-off'])}, in no stage's key.*")
    return " ".join(words)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _rows(node: dict, path: str, where: tuple, root: dict, notes: dict, required: bool, out: list) -> None:
    """Append (key, type, default, description) for `node` and every key below it; `where` is
    the node's place in the schema file (for its comment)."""
    if "$ref" in node and "properties" in root["definitions"][node["$ref"].rsplit("/", 1)[-1]]:
        inner = ("definitions", node["$ref"].rsplit("/", 1)[-1])  # a shared block: its own comments
    else:
        inner = where
    text = node.get("description") or notes.get(where, "")
    node = schema_module.ref(node, root)
    text = " ".join(t for t in (_key_rule(node), text) if t)
    props = node.get("properties")
    extra = node.get("additionalProperties")
    if props is None and not isinstance(extra, dict):
        out.append((path, _kind(node, root), _default(node, required), text))
        return
    if text or "default" in node or required:
        out.append((path, "section" if props else _kind(node, root), _default(node, required), text))
    need = set(node.get("required", []))
    for key, sub in (props or {}).items():
        _rows(sub, f"{path}.{key}", inner + ("properties", key), root, notes, key in need, out)
    if isinstance(extra, dict):
        _rows(extra, f"{path}.<name>", inner + ("additionalProperties",), root, notes, False, out)


def render(schema: dict | None = None) -> str:
    """The page: a header, then per top-level key a table of it and every key below it."""
    text = SCHEMA_PATH.read_text() if schema is None else ""
    root = schema if schema is not None else yaml.safe_load(text)
    notes = comments(text)
    parts = [HEADER]
    need = set(root.get("required", []))
    for section, node in root["properties"].items():
        rows: list = []
        _rows(node, section, ("properties", section), root, notes, section in need, rows)
        parts.append(f"## `{section}`\n")
        parts.append("| key | type | default | description |\n|---|---|---|---|")
        parts.append("\n".join(f"| `{p}` | {_cell(k)} | {_cell(d)} | {_cell(t)} |" for p, k, d, t in rows) + "\n")
    return "\n".join(parts)


def page_main(prog: str, description: str, page: Path, render_page, argv: list[str] | None = None) -> int:
    """The command line of a generated reference page: write it, or with --check only say whether it
    is current (exit status)."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--out", type=Path, default=page, help="the page to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is out of date")
    args = ap.parse_args(argv)
    text = render_page()
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'out of date: run without --check'}")
        return 0 if same else 1
    from boundary.core.artifacts import write_text

    write_text(text, args.out)
    print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return page_main("python -m boundary.core.config_reference",
                     "Write docs/reference/config.md from the config schema.", PAGE, render, argv)


if __name__ == "__main__":
    sys.exit(main())
