"""A small Triton kernel for the compile-ahead test: an integer argument that specializes on its value (== 1,
divisible by 16) and constexprs, as fused_moe_kernel's row counts and block sizes do."""
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask) * SCALE, mask=mask)
