"""SGLang's own fused MoE tuner (`benchmark/kernels/fused_moe_triton/` of an SGLang source checkout), as the bar
our tuning is measured against: the files it needs, checked against the installed SGLang, and what it runs with.

The user gives the checkout's folder; nothing of it is copied into this project. `TunerScript.open(folder)`
checks it: the tuner script and its common_utils.py are there, every SGLang name they import exists in the
installed SGLang (read with `ast`, nothing imported: a script of another SGLang release is refused, naming the
first missing name), the script defines what the runner calls; and records both files' hashes. Ray is served in
the process (ray_local), through a `ray` package that `shim_dir` writes. SGLang's tuner reads the expert shape from
a model's config.json: `model_dir` writes one (Mixtral's architecture, which its common_utils reads by default).
"""
from __future__ import annotations

import ast
import hashlib
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from astra_sglang.errors import AstraError
from astra_sglang.triton.moe.shapes import MoeShape

SCRIPT = "tuning_fused_moe_triton.py"
COMMON = "common_utils.py"
DEFINES = {SCRIPT: ("BenchmarkWorker", "benchmark_config", "main", "ServerArgs"), COMMON: ("get_configs_compute_bound",)}
"""Module-level names the runner uses (defined or imported)."""


def script_values(shape: MoeShape, tokens: int, configs: list[dict], dtype=None) -> dict:
    """The arguments of the script's BenchmarkWorker.tune and benchmark_config, by name (`dtype`: the activations'
    torch dtype; per-tensor quantization: no per-channel scales, no block shape)."""
    return dict(num_tokens=tokens, num_experts=shape.experts, shard_intermediate_size=2 * shape.inter,
                hidden_size=shape.hidden, topk=shape.topk, dtype=dtype, **shape.quant_flags(),
                per_channel_quant=False, block_shape=None, search_space=configs)


KNOWN_PARAMS = ("config", *script_values(MoeShape(1, 1, 1, 1), 1, []))
"""The parameters the runner passes (by name) to the script's BenchmarkWorker.tune and benchmark_config: the
config, and script_values' names."""


@dataclass(frozen=True)
class TunerScript:
    folder: Path
    hashes: dict[str, str]
    """File name -> sha256 (first 16 hex digits) of the files run: the script, common_utils.py and any other module
    of the folder they import."""
    batch_sizes_flag: bool
    """The script takes --batch-sizes (several batch sizes in one run); else one --batch-size per run."""

    @property
    def script(self) -> Path:
        return self.folder / SCRIPT

    @classmethod
    def open(cls, folder: str | Path) -> "TunerScript":
        folder = Path(folder)
        hashes = {}
        for name in DEFINES:
            if not (folder / name).is_file():
                raise AstraError(f"{folder} is not SGLang's benchmark/kernels/fused_moe_triton folder: no {name}")
        for name, needed in DEFINES.items():
            path = folder / name
            text = path.read_text()
            tree = ast.parse(text, filename=str(path))
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            defined |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
            missing = [n for n in needed if n not in defined]
            if missing:
                raise AstraError(f"{path} defines no {', '.join(missing)}: not a tuner script this runner knows")
            check_imports(path, tree)
            if name == SCRIPT:
                check_params(path, tree)
            hashes[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
            for local in local_imports(folder, path, tree):
                hashes.setdefault(local.name, hashlib.sha256(local.read_bytes()).hexdigest()[:16])
        return cls(folder, hashes, "--batch-sizes" in (folder / SCRIPT).read_text())


def check_params(path: Path, tree: ast.Module) -> None:
    """Every parameter without a default of BenchmarkWorker.tune and benchmark_config is one the runner passes
    (AstraError naming the first that is not: a script of another release, found before any GPU time is spent)."""
    worker = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BenchmarkWorker"), None)
    tune = next((n for n in (worker.body if worker else []) if isinstance(n, ast.FunctionDef) and n.name == "tune"),
                None)
    bench = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "benchmark_config")
    if tune is None:
        raise AstraError(f"{path} has no BenchmarkWorker.tune: not a tuner script this runner knows")
    for fn in (tune, bench):
        positional = fn.args.posonlyargs + fn.args.args
        required = positional[:len(positional) - len(fn.args.defaults)]
        required += [a for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is None]
        unknown = [a.arg for a in required if a.arg not in KNOWN_PARAMS and a.arg != "self"]
        if unknown:
            raise AstraError(f"{path.name}: {fn.name}() takes {', '.join(unknown)}, which this runner does not pass")


def sglang_imports(tree: ast.Module) -> list[tuple[str, str]]:
    """(module, name) of every `from sglang... import name` and (module, "") of every `import sglang...`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang"):
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("sglang")]
    return out


def local_imports(folder: Path, path: Path, tree: ast.Module) -> list[Path]:
    """The folder's own modules the file imports; AstraError for a module that is neither there, nor served
    (ray), nor installed: the files to carry are the folder's, and only they."""
    import importlib.util

    out = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        for top in {n.split(".")[0] for n in names}:
            if (folder / f"{top}.py").is_file():
                out.append(folder / f"{top}.py")
            elif top != "ray" and top not in sys.stdlib_module_names and importlib.util.find_spec(top) is None:
                raise AstraError(f"{path.name} imports {top}, which is neither in {folder} nor installed here")
    return sorted(set(out))


def check_imports(path: Path, tree: ast.Module) -> None:
    """Every SGLang name the file imports is in the installed SGLang (AstraError naming the first that is not)."""
    from astra_sglang.extraction.static_targets import module_source, static_check
    from astra_sglang.patchset.manifest import Target

    for module, name in sglang_imports(tree):
        if not name:
            if module_source(module) is None:
                raise AstraError(f"{path.name} imports {module}, which the installed SGLang does not have: "
                                 "use the tuner of the installed SGLang's release")
            continue
        if module_source(f"{module}.{name}") is not None:  # a submodule imported by name
            continue
        check = static_check(Target(module, name))
        if check.status != "ok":
            raise AstraError(f"{path.name} imports {name} from {module}: {check.detail}; use the tuner of the "
                             "installed SGLang's release")


def shim_dir(root: Path) -> Path:
    """`root/ray-local`, holding a `ray` package that serves Ray's API in-process (ray_local): put it first on
    the tuner's path."""
    import jinja2

    from astra_sglang.paths import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "ray_local")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    out = Path(root) / "ray-local"
    (out / "ray" / "experimental").mkdir(parents=True, exist_ok=True)
    (out / "ray" / "__init__.py").write_text(env.get_template("ray_init.py.j2").render())
    (out / "ray" / "experimental" / "__init__.py").write_text("")
    (out / "ray" / "experimental" / "tqdm_ray.py").write_text(env.get_template("tqdm_ray.py.j2").render())
    return out


def model_dir(shape: MoeShape, root: Path) -> Path:
    """A model folder whose config.json gives SGLang's tuner this expert shape at tensor-parallel size 1, in
    Mixtral's architecture whatever the model: common_utils.get_model_config reads (experts, intermediate size,
    hidden size, top-k) from it, and for Qwen3-MoE or DeepSeek-V2 (no shared expert fused at V2) it would give the
    same four from those models' own keys; the script's run() only asks whether it is DeepSeek-V4. Per-tensor fp8
    takes no quantization_config (the script's --dtype fp8_w8a8 says it; a block_shape would come from one)."""
    suffix = f"-{shape.quant}" if shape.quantized else ""
    out = Path(root) / f"moe-{shape.experts}x{shape.inter}x{shape.hidden}x{shape.topk}{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": shape.hidden,
              "intermediate_size": shape.inter, "num_local_experts": shape.experts,
              "num_experts_per_tok": shape.topk, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 1, "vocab_size": 32000, "torch_dtype": shape.dtype}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out


def key(config: dict) -> tuple:
    return tuple(sorted((k, int(v)) for k, v in config.items()))


def subset(space: list[dict], ranked: list[dict], sample: int, seed: int) -> tuple[list[dict], int]:
    """(configs, how many of them are ranked ones): the ranked configs that are in SGLang's space, in their
    order, then `sample` others drawn from the rest of it with `seed`."""
    known = {key(c): c for c in space}
    first = list({key(c): known[key(c)] for c in ranked if key(c) in known}.values())
    taken = {key(c) for c in first}
    rest = [c for c in space if key(c) not in taken]
    return first + random.Random(seed).sample(rest, min(sample, len(rest))), len(first)
