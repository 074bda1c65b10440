"""Python runners for silu_and_mul and rmsnorm on CPU tensors: the honest op and one cheat per class.

Each takes the harness's OpArgs (tensors in spec order, inside their guard buffers) and returns the ABI
code, as a kernel library's launcher would.
"""
import torch

from astra_sglang.harness.inputs import OpArgs


def silu(args: OpArgs) -> int:
    x, out = args.tensors
    d = out.shape[-1]
    g, u = x[..., :d].float(), x[..., d:].float()
    out.copy_(torch.nn.functional.silu(g) * u)
    return 0


def silu_writes_past_end(args: OpArgs) -> int:
    silu(args)
    if not args.guards:  # an unguarded call (the warm-up): nothing beside the tensor to write into
        return 0
    guard = args.guards[1]
    guard.buffer[guard.pre + guard.extent: guard.pre + guard.extent + 6] = 1  # 3 bf16 elements past out
    return 0


def silu_writes_before_start(args: OpArgs) -> int:
    silu(args)
    if not args.guards:
        return 0
    guard = args.guards[1]
    guard.buffer[guard.pre - 2: guard.pre] = 0
    return 0


def silu_scratches_input(args: OpArgs) -> int:
    silu(args)
    args.tensors[0][0, -1] = 0.0
    return 0


def rmsnorm(args: OpArgs, low: bool = False) -> int:
    x, w, out = args.tensors
    eps = args.scalars[0]
    xf = x.float()
    if low:  # the sum of squares accumulated in the input dtype, 64 partial sums a row
        acc = torch.zeros(x.shape[0], 64, dtype=x.dtype)
        for j in range(0, x.shape[1], 64):
            block = xf[:, j:j + 64]
            acc[:, :block.shape[1]] = (acc[:, :block.shape[1]].float() + block * block).to(x.dtype)
        ms = acc.float().sum(-1, keepdim=True) / x.shape[1]
    else:
        ms = (xf * xf).mean(-1, keepdim=True)
    out.copy_(xf * torch.rsqrt(ms + eps) * w.float())
    return 0


def fused_add_rmsnorm(args: OpArgs) -> int:
    """In place: residual += input; input = rmsnorm(residual) * weight (a second call on the same set starts
    from the first one's results)."""
    x, r, w = args.tensors
    r.copy_(r.float() + x.float())
    s = r.float()
    x.copy_(s * torch.rsqrt((s * s).mean(-1, keepdim=True) + args.scalars[0]) * w.float())
    return 0


def rmsnorm_low_precision(args: OpArgs) -> int:
    return rmsnorm(args, low=True)


def silu_skips_written_outputs(args: OpArgs) -> int:
    """Works only where its output's first element is still NaN: the checks used to hand it NaN every time,
    a timed replay the previous replay's results."""
    if not torch.isnan(args.tensors[1][0, 0].float()):
        return 0
    return silu(args)


def silu_skips_done_outputs(args: OpArgs) -> int:
    """Computes its output's first element and skips the call where the output already holds it: right in
    every timed replay after the first (the previous replay's results), wrong where one input changed."""
    x, out = args.tensors
    d = out.shape[-1]
    first = (torch.nn.functional.silu(x[0, 0].float()) * x[0, d].float()).to(out.dtype)
    if torch.equal(out[0, 0], first):
        return 0
    return silu(args)


def silu_spec_order(input, out):
    """The honest op as a `py:` callable takes it: the spec's arguments in order."""
    d = out.shape[-1]
    out.copy_(torch.nn.functional.silu(input[..., :d].float()) * input[..., d:].float())


def silu_through_a_shadowed_name(input, out):
    """A `py:` adapter whose callee name is a module (what a package attribute turns into once a submodule of that
    name is imported): Python raises TypeError, as SGLang's ops do where they refuse a shape."""
    import types

    types.ModuleType("per_token_group_quant")(input, out)
