"""Prompts as problems: the text of a chat-message prompt, a stable key from a problem's text,
and matching a prompt to the problem it asks, so that files of different tools (or a gold
file) pair by the problem itself rather than by row numbers.

Tools wrap the same problem in different templates (lighteval's query template, verl's chat
template, few-shot examples). Texts are compared after `normalise` (Unicode NFKC, runs of
white space as one space); a prompt matches a problem when it equals it or contains it, the
problem that ends last winning (few-shot examples come before the question), then the
longest (not one nested in another). `core` strips what all prompts of one file share (the
template) so a file's own prompts can serve as problems.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError, warn

ANCHOR = 24  # characters of a problem looked up in every prompt before the full containment test
_SPACE = re.compile(r"\s+")


def normalise(text) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", str(text))).strip()


SNIPPET = 60  # characters of a problem shown beside its id in tables and error lines

# The last user turn of a prompt rendered through a chat template (the templates of the models
# RLVR trains: ChatML (Qwen, SmolLM2), Llama 3, Gemma, Phi-3, Mistral / Llama 2), and of ChatML
# decoded without its special tokens, as verl's dumps hold it ("system\n...\nuser\n...\nassistant").
USER_TURNS = [re.compile(p, re.S) for p in (
    r"<\|im_start\|>user\s*\n(.*?)(?:<\|im_end\|>|$)",
    r"<\|start_header_id\|>user<\|end_header_id\|>\s*(.*?)(?:<\|eot_id\|>|$)",
    r"<start_of_turn>user\s*\n(.*?)(?:<end_of_turn>|$)",
    r"<\|user\|>\s*(.*?)(?:<\|end\|>|$)",
    r"\[INST\](?:\s*<<SYS>>.*?<</SYS>>)?\s*(.*?)\s*\[/INST\]",
    r"(?:^|\n)user\n(.*?)\nassistant\s*$",
)]


def question(text) -> str:
    """The problem a prompt asks: the last user turn where the prompt is a chat template's
    rendering (its system turn and markers are not the problem), else the text as it is."""
    if not isinstance(text, str):
        return text
    for pattern in USER_TURNS:
        turns = [t.strip() for t in pattern.findall(text) if t.strip()]
        if turns:
            return turns[-1]
    return text


def snippet(text, width: int = SNIPPET) -> str:
    """A problem's text on one line, cut to `width` characters ("" for none): what a reader
    sees beside an opaque id such as h0b9cbf737395. A chat-templated prompt is quoted by its
    question, not the template's first words."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return ""
    t = normalise(question(text))
    return t if len(t) <= width else t[:width - 1].rstrip() + "…"


def named(prompt_id, problems: dict | None) -> str:
    """A prompt id for an error line: with its problem's snippet where one is known."""
    text = snippet((problems or {}).get(prompt_id))
    return f"{prompt_id} ({text!r})" if text else str(prompt_id)


def text_id(text) -> str:
    """A stable prompt key from prompt text: the same (normalised) text gets the same id in every file."""
    return "h" + hashlib.sha1(normalise(text).encode("utf-8")).hexdigest()[:12]


def key_by_text(samples: pd.DataFrame, path) -> pd.DataFrame:
    """prompt_id from the prompt text where the tool gave none (factorised: hashed once per prompt)."""
    if samples["prompt_id"].notna().all():
        return samples
    if samples["prompt"].isna().any():
        raise BoundaryError(f"{path}: samples without a prompt id or prompt text")
    codes, uniques = pd.factorize(samples["prompt"])
    ids = np.array([text_id(t) for t in uniques], dtype=object)
    return samples.assign(prompt_id=ids[codes])


def is_messages(value) -> bool:
    """A chat-message list ([{role, content}, ...]) as TRL, verl and LiteLLM store prompts."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or len(value) == 0:
        return False
    return all(isinstance(m, dict) and "content" in m for m in value)


def message_text(value) -> str:
    """The question of a chat-message prompt: its last user turn, else its last turn; a string
    stays as it is."""
    if not is_messages(value):
        return value if isinstance(value, str) or value is None else str(value)
    turns = list(value)
    chosen = [m for m in turns if m.get("role") == "user"] or turns
    content = chosen[-1].get("content")
    if isinstance(content, (list, tuple, np.ndarray)):  # multimodal parts [{type, text}, {type, image}]
        content = " ".join(str(p["text"]) for p in content if isinstance(p, dict) and p.get("text"))
    return "" if content is None else str(content)


def field_texts(values, field: str, path) -> list[str]:
    """A data file's problem or gold-answer column as text, each value as written, or one line
    naming the file, field and row: a null or blank value; chat messages with other than one
    user turn (which would be the problem?); an object other than verl's `reward_model`
    (whose `ground_truth` is the answer); a list. A system turn beside the user turn is
    dropped, with one warning."""
    out, system = [], False
    for row, value in enumerate(values, 1):
        name = field
        if isinstance(value, dict) and "ground_truth" in value:  # verl's reward_model
            value, name = value["ground_truth"], f"{field}.ground_truth"
        where = f"{path}: row {row}: field {name!r}"
        if is_messages(value):
            roles = [m.get("role") for m in value]
            if roles.count("user") != 1 or set(roles) - {"user", "system"}:
                raise BoundaryError(f"{where} holds chat messages ({', '.join(map(str, roles))}), not one user "
                                    "turn: give the problem as text")
            system = system or "system" in roles
            value = message_text(value)
        if isinstance(value, dict):
            raise BoundaryError(f"{where} holds an object (keys {', '.join(map(str, list(value)[:5]))}), not text: "
                                "name the field that holds the text")
        if isinstance(value, (list, tuple, np.ndarray)):
            raise BoundaryError(f"{where} holds a list, not text")
        if value is None or (isinstance(value, float) and np.isnan(value)) or not str(value).strip():
            raise BoundaryError(f"{where} is empty")
        out.append(value if isinstance(value, str) else str(value))
    if system:
        warn(f"{path}: field {field!r} holds chat messages with a system turn: only the user turn is used "
             "(prompt.system sets a system message)")
    return out


def completion_text(value) -> str:
    """A completion as text: the assistant turns of a message list (TRL's conversational format)."""
    if not is_messages(value):
        return value if isinstance(value, str) or value is None else str(value)
    parts = [m.get("content") for m in value if m.get("role", "assistant") == "assistant"]
    return "\n".join(str(p) for p in parts if p is not None)


def core(texts) -> list[str]:
    """Each normalised text without the prefix and suffix that every text of the list shares (a
    file's template), so what is left lies inside the problem; a text left too short to be
    specific keeps its whole."""
    norm = [normalise(t) for t in texts]
    distinct = set(norm)
    if len(distinct) < 2:
        return norm
    head = os.path.commonprefix(list(distinct))
    tail = os.path.commonprefix([t[::-1] for t in distinct])
    out = []
    for t in norm:
        cut = t[len(head):len(t) - len(tail)] if len(head) + len(tail) < len(t) else ""
        out.append(cut.strip() if len(cut.strip()) >= 8 else t)
    return out


class ProblemIndex:
    """Problems (key -> text) that prompts are matched to: equal normalised text (whole, or its
    `core` where `cores` is set), else the problem (core) contained in the prompt that ends
    last, then the longest."""

    def __init__(self, problems: dict, cores: bool = True):
        keys, texts = list(problems), list(problems.values())
        inner = core(texts) if cores else [normalise(t) for t in texts]
        self.exact, self.anchors, self.short = {}, {}, []
        for key, text, t in zip(keys, texts, inner):
            if not t:
                continue
            self.exact.setdefault(normalise(text), key)
            self.exact.setdefault(t, key)
            if len(t) < ANCHOR:
                self.short.append((t, key))
            else:
                mid = (len(t) - ANCHOR) // 2  # the middle: a template's start is shared by many
                self.anchors.setdefault(t[mid:mid + ANCHOR], []).append((t, key))

    def match(self, text):
        t = normalise(text)
        exact = self.exact.get(t)
        if exact is not None:
            return exact
        candidates = list(self.short)
        for i in range(len(t) - ANCHOR + 1):
            candidates += self.anchors.get(t[i:i + ANCHOR], ())
        found = [(t.rfind(p) + len(p), len(p), key) for p, key in candidates if p in t]
        return max(found, key=lambda f: f[:2])[2] if found else None

    def __len__(self):
        return len(self.exact)
