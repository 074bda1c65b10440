"""`astra-sglang extract`: turn one real SGLang / sgl-kernel / flashinfer kernel into a standalone harness.

Stages (each a module, typed records between them): sources (where the CUDA lives and its version) ->
clang_env (a libclang setup that works from registry packages alone) -> closure (the kernel's transitive
dependencies, from libclang's AST plus macro and by-name passes) -> emit (kernel.cu with a C-ABI launcher
rendered from harness_templates/launchers, spec.toml, provenance.json).
"""
