"""The model a server is started with, checked before SGLang starts (`launch`, `ab`, `profile`): SGLang only
finds out minutes later, after its workers spawned, with a traceback.

A local path must be a folder holding config.json (and weights, unless --load-format dummy makes random ones);
a name that can only be a Hugging Face hub id (org/name) is passed on, with a line saying it needs the hub
(network) or a cached copy.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from astra_sglang.errors import AstraError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
"""A hub repo id: `name` or `org/name` (letters, digits, - _ .), which a local path may also look like."""
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
NEEDS_WEIGHTS = (None, "auto", "safetensors", "pt", "npcache")
"""Load formats that read weight files from the model folder (dummy, gguf, remote ones... do not)."""


def option(args: list[str] | tuple[str, ...], *names: str) -> str | None:
    """The value of the first of `names` in a command line (`--name VALUE` or `--name=VALUE`)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _cached_on_hub(repo: str) -> bool:
    """The hub id's config.json is in the local Hugging Face cache (no network needed for it)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo, "config.json"), str)
    except Exception:  # noqa: BLE001 - a name the hub library refuses is simply not cached
        return False


def check_model(model: str, load_format: str | None = None, note: Callable[[str], None] = lambda msg: None,
                option_name: str = "--model-path") -> None:
    """AstraError (one line) where SGLang could not load `model`; `note` says so where it needs the hub to."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise AstraError(f"{option_name} {model}: the folder holds no config.json (SGLang reads the model's "
                             "architecture from it)")
        if load_format in NEEDS_WEIGHTS and not any(next(path.glob(p), None) for p in WEIGHTS):
            raise AstraError(f"{option_name} {model}: no weights in the folder ({', '.join(WEIGHTS)}); add "
                             "--load-format dummy for random weights of the model's shapes")
        return
    if path.is_file():
        if path.suffix == ".gguf":
            return
        raise AstraError(f"{option_name} {model}: a file; give the model's folder (config.json, tokenizer, weights)")
    if not HUB_ID.match(model) or model.startswith((".", "~")):
        raise AstraError(f"{option_name} {model}: no such folder (a local model folder holding config.json, or a "
                         "Hugging Face hub id such as meta-llama/Llama-3.1-8B-Instruct)")
    if _cached_on_hub(model):
        return
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        raise AstraError(f"{option_name} {model}: no such folder here, and HF_HUB_OFFLINE is set while the hub id "
                         "is not in the local Hugging Face cache")
    note(f"{option_name} {model} is no folder here: SGLang will fetch it as a Hugging Face hub id, which needs "
         "network access (and the weights, unless --load-format dummy)")


def check_server_args(args: list[str] | tuple[str, ...], note: Callable[[str], None] = lambda msg: None,
                      required: bool = False) -> None:
    """`check_model` for the model a server's command line names (`--model-path` / `--model`); where it names
    none, AstraError if `required` (SGLang's own usage error otherwise)."""
    model = option(args, "--model-path", "--model")
    if model is None and required:
        raise AstraError("the server's arguments need --model-path (after --, e.g. -- --model-path M "
                         "--load-format dummy)")
    if model is not None:
        check_model(model, option(args, "--load-format"), note,
                    "--model-path" if option(args, "--model-path") is not None else "--model")
