"""Robust parsing of model answers: the kernel file in a fenced code block, JSON objects in free text.

Malformed answers raise ParseError, whose message is written to be fed back to the model verbatim
(the roles give it one more try, configurable); parsing never crashes the run.
"""
from __future__ import annotations

import json
import re
from typing import Any

from astra_sglang.errors import AstraError

CODE_LANGS = {"", "cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "cuh", "h", "hpp"}
ENTRY_MARKERS = ("astra_launch", "ASTRA_ENTRY")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*$", re.M)


class ParseError(AstraError):
    """The answer is not in the requested form; the message tells the model what to fix."""


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """All complete fenced blocks as (language, body), and whether an unclosed fence was left at the end."""
    blocks, pos, unclosed = [], 0, False
    while True:
        start = _FENCE.search(text, pos)
        if start is None:
            break
        fence, lang = start.group(1), start.group(2).lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        end = close.search(text, start.end())
        if end is None:
            unclosed = True
            break
        blocks.append((lang, text[start.end() + 1:end.start()]))
        pos = end.end()
    return blocks, unclosed


def extract_code(text: str) -> str:
    """The last complete ```cuda / ```cpp / ``` block that defines the C-ABI entry `astra_launch`."""
    blocks, unclosed = fenced_blocks(text)
    code = [body for lang, body in blocks if lang in CODE_LANGS]
    with_entry = [body for body in code if any(m in body for m in ENTRY_MARKERS)]
    if with_entry:
        return with_entry[-1].rstrip() + "\n"
    if unclosed:
        raise ParseError("your answer ends inside an unclosed ``` code block (was it cut off?). "
                         "Send the complete kernel file again in one ```cuda block, with less commentary.")
    if code:
        raise ParseError("none of your code blocks defines the C-ABI entry point: the kernel file must define "
                         "`ASTRA_ENTRY { ... }` (extern \"C\" int astra_launch(...)). Send the complete file "
                         "in one ```cuda block.")
    raise ParseError("no fenced code block found. Send the complete kernel file in one ```cuda ... ``` block.")


def _objects(text: str) -> list[Any]:
    decoder, out, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        out.append(obj)
        i = end
    return out


def extract_json(text: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The last JSON object in the answer (```json blocks first) that has every `required` key."""
    blocks, _ = fenced_blocks(text)
    candidates = [o for lang, body in blocks if lang in ("json", "") for o in _objects(body)]
    candidates += _objects(text)
    found = [o for o in candidates if isinstance(o, dict)]
    good = [o for o in found if all(k in o for k in required)]
    if good:
        return good[-1]
    keys = ", ".join(f'"{k}"' for k in required)
    if found:
        raise ParseError(f"your JSON object lacks required keys ({keys}). Answer with one JSON object in a "
                         "```json block.")
    raise ParseError("no valid JSON object found (check quotes, commas and brackets). Answer with one JSON "
                     f"object{f' with keys {keys}' if keys else ''} in a ```json block.")


def strip_code(text: str) -> str:
    """The answer without its fenced blocks (a plan's prose, say)."""
    blocks, _ = fenced_blocks(text)
    for lang, body in blocks:
        text = text.replace(body, "")
    return re.sub(r"(`{3,}|~{3,})[\w+.-]*\n?", "", text).strip()
