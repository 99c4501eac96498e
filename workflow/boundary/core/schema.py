"""The config schema (workflow/schemas/config.schema.yaml) in one module: loading it, `$ref`,
filling defaults, validation and its one-line messages, each section's defaults, keys and
allowed values, and the key rule's two annotations. core/config.py validates configs with it,
core/settings.py builds each stage's schema and key from it, core/config_reference.py renders it.

One kind of default: `default:`, which validation fills into the config, so every setting a
stage reads is in its key (core/settings.py). Two annotations say what a key leaves out:
- `x-off: V` on a setting of an opt-in feature: at V the stage computes what it computed before
  the setting existed, so the key leaves the setting out (and a feature that is off by default
  moves no existing run's key). V is the default. On a section, V may be a mapping: the section
  is off (left out whole) while each key of V holds its value (`x-off: {enabled: false}`).
- `x-read-with: {sibling: V}` (a list V: one of): the setting is read only while each named
  setting beside it holds V. Then it is left out of the key, and a config that gives it
  otherwise is refused (core/config.py), so a default edit reruns only the stages that read it.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import yaml

PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@functools.cache
def text() -> str:
    return PATH.read_text()


@functools.cache
def load() -> dict:
    """The schema, parsed once (read only: callers copy what they change). libyaml's loader
    where PyYAML has it: every stage process parses the schema, 5x faster so."""
    return yaml.load(text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def ref(node: dict, root: dict | None = None) -> dict:
    """`node` with its `$ref` (a `#/definitions/<name>`) resolved; its own keys win."""
    if "$ref" not in node:
        return node
    root = root or load()
    named = root["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    return {**ref(named, root), **{k: v for k, v in node.items() if k != "$ref"}}


def is_object(node: dict) -> bool:
    """An object schema, nullable ones (`type: [object, "null"]`) included."""
    kind = node.get("type")
    return kind == "object" or isinstance(kind, list) and "object" in kind


def entries(node: dict, root: dict | None = None) -> dict | None:
    """The schema of a map's entries (`additionalProperties` given as a schema), or None."""
    extra = node.get("additionalProperties")
    return ref(extra, root) if isinstance(extra, dict) else None


def fill_defaults(node: dict, schema: dict, root: dict | None = None) -> None:
    """Fill the schema's `default:` values into `node`, recursively (objects and maps)."""
    root = root or schema
    for key, sub in schema.get("properties", {}).items():
        sub = ref(sub, root)
        if key not in node and "default" in sub:
            node[key] = copy.deepcopy(sub["default"])
        if isinstance(node.get(key), dict) and is_object(sub):
            fill_defaults(node[key], sub, root)
    extra = entries(schema, root)
    if extra and is_object(extra):
        for key, value in node.items():
            if key not in schema.get("properties", {}) and isinstance(value, dict):
                fill_defaults(value, extra, root)


def validator(schema: dict | None = None):
    """Draft 7, except that an integer is an int: JSON schema takes 32.0 for 32, and a count
    or seed written as a float would crash a stage only after every upstream one has run."""
    import jsonschema

    def is_integer(checker, value):
        return isinstance(value, int) and not isinstance(value, bool)

    checker = jsonschema.Draft7Validator.TYPE_CHECKER.redefine("integer", is_integer)
    return jsonschema.validators.extend(jsonschema.Draft7Validator, type_checker=checker)(schema or load())


def first_error(instance, schema: dict | None = None):
    """The error to report of `instance` against `schema`: the shallowest, then by path; or None."""
    errors = validator(schema).iter_errors(instance)
    return min(errors, key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))), default=None)


def where(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def message(err) -> str:
    """One line for a schema error, naming the field."""
    at = where(err)
    if err.validator == "required":
        missing = next(k for k in err.validator_value if k not in err.instance)
        return f"{at + '.' if err.absolute_path else ''}{missing}: missing"
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"unknown key {(f'{at}.' if err.absolute_path else '') + extra[0]!r}"
    if "propertyNames" in err.schema_path:  # a name of a method, mask or benchmark
        name = err.instance
        what = "a blank name" if not str(name).strip() else f"name {name!r}"
        return (f"{at}: {what}: names hold only letters, digits and _ (they become folder, "
                "file and rule names)")
    return f"{at}: {err.message}"


def section(path: str) -> dict:
    """A copy of the schema of a config section by its dotted path ("train", "testbed.task");
    "methods" and "masks" give one entry's."""
    root = load()
    node = root
    for key in path.split("."):
        node = ref(node["properties"][key], root)
    if path in ("methods", "masks"):
        node = entries(node, root)
    return copy.deepcopy(node)


def defaults(path: str) -> dict:
    """The defaults of a section's keys (`methods`, `masks`: of one entry). Code reads them through
    core.settings.defaults (rendered as JSON, readable without PyYAML)."""
    return {key: copy.deepcopy(sub["default"]) for key, sub in
            ((k, ref(v)) for k, v in section(path).get("properties", {}).items()) if "default" in sub}


def keys(path: str) -> set[str]:
    """Every key the schema allows in a section (`methods`: in one method entry)."""
    return set(section(path).get("properties", {}))


def allowed(path: str, key: str) -> tuple:
    """The values the schema allows a key (its `enum`), e.g. allowed("methods", "kl_estimator")."""
    return tuple(v for v in ref(section(path)["properties"][key])["enum"] if v is not None)


def check_finite(node, what: str, where: str = "") -> None:
    """No NaN or infinity anywhere in `node` (a config, or `--settings`): JSON schema bounds let
    them through (every comparison with NaN is false), and a NaN temperature or rate gives
    numbers without a word. One line, `what: <key>: ...`."""
    import math

    from boundary.core.errors import BoundaryError

    if isinstance(node, float) and not math.isfinite(node):
        text_ = ".nan" if math.isnan(node) else ".inf" if node > 0 else "-.inf"
        raise BoundaryError(f"{what}: {where or '<top level>'}: {text_} is not a finite number")
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        check_finite(value, what, f"{where}.{key}" if where else str(key))


# ---- the key rule's annotations ---------------------------------------------------------------

def _same(a, b) -> bool:
    """Equality of JSON values, where true and false are not numbers (0 and 0.0 are one number)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) in (int, float) and type(b) in (int, float) and a == b or type(a) is type(b) and a == b


def is_off(value, node: dict) -> bool:
    """Whether `value` is the `x-off` value of its setting (`node`): the feature is off."""
    if "x-off" not in node:
        return False
    off = node["x-off"]
    if isinstance(off, dict) and isinstance(value, dict):
        return all(k in value and _same(value[k], v) for k, v in off.items())
    return _same(value, off)


def is_read(node: dict, siblings: dict) -> bool:
    """Whether a setting (`node`) is read, given the settings beside it (`x-read-with`)."""
    for key, want in node.get("x-read-with", {}).items():
        options = want if isinstance(want, list) else [want]
        if not any(_same(siblings.get(key), v) for v in options):
            return False
    return True


def read_with_text(node: dict, prefix: str = "") -> str:
    """The condition of `x-read-with` in words: "anchor: support", "kind: gate, soft or solved"."""
    parts = []
    for key, want in node.get("x-read-with", {}).items():
        options = [json.dumps(v) if not isinstance(v, str) else v for v in (want if isinstance(want, list) else [want])]
        parts.append(f"{prefix}{key}: " + (", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1
                                           else options[0]))
    return " and ".join(parts)


def read_with_values(path: str, switch: str) -> dict[object, set[str]]:
    """For each allowed value of `switch`, the keys of a section read only with it
    (`x-read-with`): read_with_values("masks", "kind")["soft"] = {"G0", "tau", "confidence"}."""
    props = section(path)["properties"]
    return {value: {k for k, sub in props.items() if switch in ref(sub).get("x-read-with", {})
                    and is_read(ref(sub), {switch: value})}
            for value in allowed(path, switch)}


def keyed(value: dict, node: dict, root: dict | None = None) -> dict:
    """`value` (settings shaped as `node`) less the settings the key rule leaves out: those at
    their `x-off` value and those not read (`x-read-with`), at every depth. Keys the schema
    does not describe (a stage's own, such as a mask's epochs) stay."""
    root = root or load()
    node = ref(node, root)
    props, extra = node.get("properties", {}), entries(node, root)
    out = {}
    for key, item in value.items():
        sub = props.get(key, extra if key not in props else None)
        if sub is None:
            out[key] = item
            continue
        sub = ref(sub, root)
        if is_off(item, sub) or not is_read(sub, value):
            continue
        out[key] = keyed(item, sub, root) if isinstance(item, dict) and (is_object(sub) or entries(sub, root)) else item
    return out
