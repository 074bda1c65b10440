"""Spec types beyond float tensors of normal noise: integer, index, bool and fp8 tensors, range / index /
generator inits, free dims, several outputs; and bad spec files reported as one line naming file and field
without breaking the other ops. Odd shapes x dtypes, on CPU."""
from __future__ import annotations

import sys

import pytest
import torch
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.errors import AstraError
from astra_sglang.harness import draw
from astra_sglang.harness.check import perturb
from astra_sglang.harness.compare import compare
from astra_sglang.harness.inputs import allocate, fill
from astra_sglang.paths import ENV_HOME
from astra_sglang.specs import registry

TOY_MODULE = '''
import torch

def ramp(shape, dtype, gen, dims):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) % 7 - 3

def gather_scale(table, idx, experts, order, scale, flag, noise, out, picked):
    """out = table[idx] * scale (rows), plus noise where flag; picked = idx."""
    x = table.double()[idx.long()] * scale.double()[:, None] + noise.double() * flag.double()[:, None]
    out.copy_(x)
    picked.copy_(idx)
'''

TOY_SPEC = '''
name = "toy_gather"
summary = "out = table[idx] * scale + noise; picked = idx"
dims = ["tokens", "d"]
dtypes = ["float32", "bf16", "float16", "fp8", "int64"]
reference = "astra_toy_ops:gather_scale"
constraints = ["d >= 2"]

[free_dims]
rows = "d + 3"

[[arguments]]
name = "table"
shape = ["rows", "d"]

[[arguments]]
name = "idx"
dtype = "i64"
shape = ["tokens"]
init = { kind = "randint", high = "rows" }

[[arguments]]
name = "experts"
dtype = "int32"
shape = ["tokens", 2]
init = { kind = "distinct", high = "d" }

[[arguments]]
name = "order"
dtype = "int64"
shape = ["d"]
init = { kind = "permutation" }

[[arguments]]
name = "scale"
dtype = "float32"
shape = ["tokens"]
init = { kind = "uniform", low = 0.5, high = 2.0 }

[[arguments]]
name = "flag"
dtype = "bool"
shape = ["tokens"]
init = { kind = "full", value = 1 }

[[arguments]]
name = "noise"
shape = ["tokens", "d"]
init = { kind = "generator", function = "astra_toy_ops:ramp" }

[[arguments]]
name = "out"
role = "out"
shape = ["tokens", "d"]

[[arguments]]
name = "picked"
role = "out"
dtype = "int64"
shape = ["tokens"]

[tolerance]
float32 = { atol = 1e-5, rtol = 1e-5 }
bfloat16 = { atol = 1e-2, rtol = 1.6e-2 }
float16 = { atol = 1e-3, rtol = 2e-3 }

[shapes]
quick = [[1, 2], [5, 7], [33, 129]]
'''
DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3fn", "int64"]
SHAPES = [(1, 2), (5, 7), (33, 129), (2, 1000)]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user folder holding the toy spec, its module importable."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "astra_toy_ops.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    (tmp_path / "home" / "specs").mkdir(parents=True)
    (tmp_path / "home" / "specs" / "toy_gather.toml").write_text(TOY_SPEC)
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "home"))
    registry.reload()
    yield tmp_path / "home"
    sys.modules.pop("astra_toy_ops", None)
    registry.reload()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_draws_follow_each_init_kind(home, shape, dtype):
    spec = registry.get_spec("toy_gather")
    tokens, d = shape
    args = fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(3))
    table, idx, experts, order, scale, flag, noise, out, picked = args.tensors
    assert table.shape == (d + 3, d) and table.dtype == getattr(torch, dtype)
    assert idx.dtype == torch.int64 and 0 <= int(idx.min()) and int(idx.max()) < d + 3
    assert experts.dtype == torch.int32 and all(len(set(r.tolist())) == 2 for r in experts)
    assert int(experts.max()) < d
    assert sorted(order.tolist()) == list(range(d))
    assert 0.5 <= float(scale.min()) and float(scale.max()) < 2.0
    assert flag.dtype == torch.bool and bool(flag.all())
    assert torch.equal(noise.double(), (torch.arange(tokens * d, dtype=torch.float64).reshape(tokens, d) % 7 - 3))
    assert int(picked[0]) == draw.INT_POISON[torch.int64]
    assert bool(out.double().isnan().all()) if dtype != "int64" else int(out[0, 0]) == draw.INT_POISON[torch.int64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_compare_is_exact_for_integers_and_upcasts_fp8(home, shape, dtype):
    spec = registry.get_spec("toy_gather")
    args = fill(spec, allocate(spec, shape, dtype, "cpu"), torch.Generator().manual_seed(4))
    ref = args.upcast()
    assert ref.tensors[1].dtype == torch.int64
    assert ref.tensors[0].dtype == (torch.int64 if dtype == "int64" else torch.float64)
    spec.reference_fn()(*ref.call_args(spec))
    unwritten = compare(spec, dtype, args, ref)
    assert not unwritten.ok and "out" in unwritten.reason
    got = args.clone()
    spec.reference_fn()(*got.call_args(spec))  # the op run in its own dtype: passes
    assert compare(spec, dtype, got, ref).ok
    bad = got.clone()
    bad.tensors[8][-1] += 1  # one index off by one: integers are compared exactly
    verdict = compare(spec, dtype, bad, ref)
    assert not verdict.ok and "picked" in verdict.reason and "exactly" in verdict.reason
    lost = got.clone()
    draw.poison(lost.tensors[8])
    assert "never written" in compare(spec, dtype, lost, ref).reason


@pytest.mark.parametrize("shape", SHAPES)
def test_perturb_changes_inputs_within_their_kind(home, shape):
    spec = registry.get_spec("toy_gather")
    gen = torch.Generator().manual_seed(5)
    args = fill(spec, allocate(spec, shape, "float32", "cpu"), gen)
    keep = args.clone()
    perturb(spec, args, keep, gen)
    table, idx, experts, order, scale, flag, noise, _, _ = args.tensors
    assert not torch.equal(table, keep.tensors[0]) and not torch.equal(idx, keep.tensors[1])
    assert int(idx.max()) < shape[1] + 3 and all(len(set(r.tolist())) == 2 for r in experts)
    assert sorted(order.tolist()) == list(range(shape[1])) and not torch.equal(order, keep.tensors[3])
    assert 0.5 <= float(scale.min()) and float(scale.max()) < 2.0
    assert torch.equal(flag, keep.tensors[5]) and torch.equal(noise, keep.tensors[6])  # full / generator kept


def test_spec_records_resolve_free_dims_and_bytes(home):
    spec = registry.get_spec("toy_gather")
    assert spec.dims_of((5, 7)) == {"tokens": 5, "d": 7, "rows": 10}
    assert spec.dtypes == ["float32", "bfloat16", "float16", "float8_e4m3fn", "int64"]
    # table 10x7 fp8 + idx 5 int64 + experts 5x2 int32 + order 7 int64 + scale 5 fp32 + flag 5 + noise 5x7
    # + out 5x7 + picked 5 int64
    assert spec.call_bytes((5, 7), "float8_e4m3fn") == 70 + 40 + 40 + 56 + 20 + 5 + 35 + 35 + 40


BAD = {
    "bad_dtype": ('dtype = "int64"', 'dtype = "int65"', "arguments.3.dtype", "unknown dtype 'int65'"),
    "bad_dim": ('shape = ["rows", "d"]', 'shape = ["rowz", "d"]', "arguments.0.shape.0", "unknown dim 'rowz'"),
    "bad_kind": ('kind = "permutation"', 'kind = "shuffle"', "arguments.3.init", "shuffle"),
    "bad_bound": ('high = "rows"', 'high = "max_pos"', "arguments.1.init.high", "unknown dim 'max_pos'"),
    "bad_index": ('dtype = "int32"', 'dtype = "float32"', "arguments.2.init", "integer dtype"),
    "bad_field": ('summary =', 'sumary =', ": summary: Field required", "(+1 more)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_spec_is_one_line_naming_file_and_field(home, case):
    old, new, loc, message = BAD[case]
    assert old in TOY_SPEC
    text = TOY_SPEC.replace(old, new, 1).replace('name = "toy_gather"', f'name = "{case}"')
    path = home / "specs" / f"{case}.toml"
    path.write_text(text)
    registry.reload()
    with pytest.raises(AstraError) as info:
        registry.get_spec(case)
    line = str(info.value)
    assert "\n" not in line and str(path) in line and loc in line and message in line
    assert registry.get_spec("rmsnorm").name == "rmsnorm"  # the others still load
    listing = CliRunner().invoke(main, ["kernels"])
    assert listing.exit_code == 0 and "toy_gather" in listing.output and "rmsnorm" in listing.output
    assert [x for x in listing.output.splitlines() if x.startswith("error:")] == [f"error: {line}"]
    alone = CliRunner().invoke(main, ["kernels", case])
    assert alone.exit_code == 1 and alone.output.strip() == f"error: {line}"


def test_not_toml_and_misnamed_files(home):
    (home / "specs" / "broken.toml").write_text("name = \n")
    (home / "specs" / "other.toml").write_text(TOY_SPEC)
    registry.reload()
    errors = registry.spec_errors()
    assert len(errors) == 2 and any("broken.toml: not TOML" in e for e in errors)
    assert any("differs from the file name 'other'" in e for e in errors)


def test_user_spec_replaces_the_package_one_with_a_note(home):
    text = (registry.specs_dir() / "rmsnorm.toml").read_text().replace("summary = ", 'summary = "mine" # ', 1)
    (home / "specs" / "rmsnorm.toml").write_text(text)
    registry.reload()
    assert registry.get_spec("rmsnorm").summary == "mine"
    out = CliRunner().invoke(main, ["kernels"])
    assert out.exit_code == 0 and f"note: rmsnorm: the user spec {home / 'specs' / 'rmsnorm.toml'}" in out.output


def test_home_option_sets_the_user_folder(home, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_HOME)
    registry.reload()
    assert "toy_gather" not in [s.name for s in registry.all_specs()]
    out = CliRunner().invoke(main, ["--home", str(home), "kernels", "toy_gather"])
    assert out.exit_code == 0 and "toy_gather" in out.output


@pytest.mark.parametrize("expr, dims, value", [("2*d", {"d": 3}, 6), ("min(tokens, max_pos) * 2", {"tokens": 9,
                         "max_pos": 4}, 8), ("-d + 10 % 4", {"d": 1}, 1), ("hidden // 128", {"hidden": 4096}, 32)])
def test_dim_expressions(expr, dims, value):
    from astra_sglang.specs.exprs import compile_dim, dim_names

    assert compile_dim(expr)(dims) == value and dim_names(expr) == sorted(dims)


@pytest.mark.parametrize("expr", ["d ** 2", "d / 2", "abs(d)", "d.x", True, 1.5, "d +"])
def test_bad_dim_expressions_name_themselves(expr):
    from astra_sglang.specs.exprs import compile_dim

    with pytest.raises(ValueError, match="expression"):
        compile_dim(expr)
