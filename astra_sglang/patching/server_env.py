"""The environment and command of a SGLang server with the enabled patches in every process: what `launch`
execs, and what `ab` and `profile --patched` start as their patched server."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from packaging.specifiers import SpecifierSet

from astra_sglang.errors import AstraError
from astra_sglang.extraction.static_targets import static_check
from astra_sglang.patching import fastcall, hook
from astra_sglang.paths import check_writable
from astra_sglang.patchset.store import PatchStore


def installed_sglang_version() -> str | None:
    """SGLang's version from its distribution metadata (no import: that is slow and needs CUDA)."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def build_all(store: PatchStore, kernels: list, fast_path: bool) -> None:
    """Every patch kernel (nvcc) and, with `fast_path`, the C++ fast path (against this torch), at once on the
    CPU cores, into their caches: built once here, not by every SGLang worker at its start. The first time on
    a machine this takes a minute or two; a live line says what is still building."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from astra_sglang.progress import step

    jobs = {e.op: (store.build, e) for e in kernels}
    if fast_path:
        jobs["the C++ fast path"] = (lambda _: fastcall.load(), None)
    what = f"building {len(kernels)} patch kernel(s){' and the C++ fast path' if fast_path else ''}"
    with step(what) as current, ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 2)) as pool:
        futures = {pool.submit(fn, arg): name for name, (fn, arg) in jobs.items()}
        for done, future in enumerate(as_completed(futures), 1):
            future.result()  # a failing kernel build: AstraError with its log's last line
            left = sorted(set(jobs) - {futures[f] for f in futures if f.done()})
            current.update(f"{done}/{len(jobs)} built; {', '.join(left)}" if left else "")


def off_lines(store: PatchStore) -> str:
    """The disabled patches for `launch`'s summary: each one a command disabled with its reason (an in-place
    verdict), the others by name."""
    off = [e for e in store.entries() if not e.enabled]
    text = "".join(f"\nastra-sglang: off: {e.op}: {e.manifest.off_reason}" for e in off if e.manifest.off_reason)
    plain = [e.op for e in off if not e.manifest.off_reason]
    return text + (f"\nastra-sglang: off in their manifests: {', '.join(plain)}" if plain else "")


def patched_server(patches: Path | None, verify_rate: float = 0.0, stats_dir: Path | None = None,
                   mechanism: str = "auto", no_build: bool = False, server_args=(), warn=lambda msg: None,
                   record: str | None = None, record_out: Path | None = None):
    """(env, argv, summary line) of `python -m sglang.launch_server SERVER_ARGS` with the enabled patches in
    every SGLang process: what `launch` execs, and what `ab` starts as its patched arm. `record`: the
    MODULE:FUNC names whose calls every process records (default file: STATS_DIR/calls.json). Raises AstraError."""
    from astra_sglang.patching.recorder import Recording, parse_targets
    from astra_sglang.patching.runtime import ENV_MECHANISM, ENV_TARGET_MODULES, RuntimeConfig

    stats_dir = stats_dir or Path("astra-stats") / time.strftime("%Y%m%d-%H%M%S")
    check_writable(stats_dir, "--stats-dir")  # the server's processes write there, and would fail silently
    if record_out:
        check_writable(record_out.parent, "--record-out")
    store = PatchStore(patches)
    entries = store.enabled()
    if not entries and not record:
        raise AstraError(f"no enabled patches in {store.describe()}: nothing to launch with")
    modules = set()
    recorded = parse_targets(record) if record else []
    for target in recorded:  # a name that is not there would record nothing, silently
        check = static_check(target)
        if check.status != "ok":
            raise AstraError(f"--record-calls {target}: {check.detail}")
        modules.add(target.module)
    installed = installed_sglang_version()
    for entry in entries:
        if installed and not SpecifierSet(entry.manifest.sglang_versions).contains(installed, prereleases=True):
            raise AstraError(f"patch {entry.op} targets sglang{entry.manifest.sglang_versions}, installed is "
                             f"{installed}: disable it (`astra-sglang patch disable {entry.op}`) or re-verify it")
        for target in entry.targets:
            check = static_check(target)
            if check.status == "not-installed":
                warn(f"{entry.op}: {check.detail}; {target} skipped")
            elif check.status != "ok":
                raise AstraError(f"patch {entry.op}: target {target} not found: {check.detail}")
            else:
                modules.add(target.module)
    kernels = [e for e in entries if e.manifest.kind == "cuda"]
    if not no_build and kernels:
        build_all(store, kernels, fast_path=verify_rate == 0)
    if mechanism == "auto":
        mechanism = "plugin" if hook.plugin_available() else "import-hook"
    elif mechanism == "plugin" and not hook.plugin_available():
        raise AstraError("the plugin mechanism needs sglang>=0.5.17 and astra-sglang's sglang.srt.plugins entry point")
    roots = tuple(r.resolve() for r in store.roots)
    config = RuntimeConfig(roots if len(roots) > 1 else roots[0], verify_rate, stats_dir.resolve(), mechanism)
    env = dict(os.environ, **config.to_env())
    env[ENV_MECHANISM] = mechanism
    env[ENV_TARGET_MODULES] = ",".join(sorted(modules))
    recording = Recording(recorded, (record_out or config.stats_dir / "calls.json").resolve()) if recorded else None
    if recording:
        env.update(recording.to_env())
    for entry in entries:  # a source variant is made from the installed SGLang source: refused here if it changed
        if entry.manifest.kind == "triton-source":
            from astra_sglang.patching.triton_source import load_variant

            load_variant(entry.manifest.variant, entry.op)
    configs = [e for e in entries if e.manifest.kind in ("triton-config", "triton-source")]
    if configs:  # SGLang reads its Triton configs from a folder holding its own files and the patches' over them
        from astra_sglang.patching.triton_config import ENV, base_dir, build_config_dir

        env[ENV] = str(build_config_dir(configs, config.stats_dir / "moe-configs", base_dir(env)))
    if mechanism == "plugin":
        allowed = [p for p in env.get("SGLANG_PLUGINS", "").split(",") if p.strip()]
        if allowed and hook.PLUGIN_NAME not in allowed:  # an allow-list without us would skip the patches
            env["SGLANG_PLUGINS"] = ",".join([*allowed, hook.PLUGIN_NAME])
    else:
        folder = hook.write_sitecustomize()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "sglang.launch_server", *server_args]
    summary = (f"astra-sglang: {len(entries)} patch(es) [{', '.join(e.op for e in entries)}] via {mechanism}; "
               f"stats in {config.stats_dir}")
    summary += off_lines(store)
    if recording:
        summary += "\nastra-sglang: recording calls of " + ", ".join(
            f"{t} into {r.path}" for t, r in recording.recorders.items())
    return env, command, summary
