"""Bad input at the edge: each is one line naming its cause, exit status 1 (click's own usage errors: 2), and
nothing is built, evaluated or started before it. A new user's mistakes, command by command."""
from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.harness import build, isolate
from astra_sglang.paths import patches_dir


@pytest.fixture
def nothing_runs(monkeypatch):
    """Any build, evaluation or server start fails the test: the error must come first."""
    def ran(*args, **kwargs):
        raise AssertionError("built, evaluated or started before the input was checked")

    ran.__module__ = isolate.__name__  # stands for the harness's own evaluator: `optimize` checks what it needs

    for module, name in ((build, "build_library"), (isolate, "evaluate"), (isolate, "evaluate_many"),
                         (isolate, "_evaluate_once")):
        monkeypatch.setattr(module, name, ran)
    monkeypatch.setattr("astra_sglang.patching.server_env.build_all", ran)
    monkeypatch.setattr("astra_sglang.serving.server.start_server", ran)
    monkeypatch.setattr("astra_sglang.profile.ceilings.measure", ran)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return ran


def one_line(args, code=1, prefix="error: "):
    """The command's whole output: one line, its message (without the prefix)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), result.output
    return lines[0].removeprefix(prefix)


# -- shapes: every command that takes them parses them in specs/registry.py ----------------------------------

SHAPES = [
    ("silu_and_mul", "-16x4096", "shape -16x4096 of silu_and_mul: tokens is -16; it is at least 1"),
    ("silu_and_mul", "0x4096", "shape 0x4096 of silu_and_mul: tokens is 0; it is at least 1"),
    ("silu_and_mul", "16x0", "shape 16x0 of silu_and_mul: d is 0; it is at least 1"),
    ("silu_and_mul", "1.5x4096",
     "bad shape '1.5x4096': write silu_and_mul's dims (tokens x d) as integers joined by 'x', e.g. 16x4096"),
    ("silu_and_mul", "16xd", "bad shape '16xd': write silu_and_mul's dims (tokens x d) as integers joined by 'x', "
                             "e.g. 16x4096"),
    ("silu_and_mul", "16x4096x2", "shape '16x4096x2' of silu_and_mul needs 2 dims (tokens x d), e.g. 16x4096"),
    ("silu_and_mul", ",", "no shape in ',': give a set (quick, paper, models, edge, held_out, all, gate, served) or "
                          "a list like 16x4096"),
    ("merge_attn_states_lse", "16x32x100", "shape 16x32x100 of merge_attn_states_lse: head_dim % 8 == 0 does not "
     "hold (the spec's constraints: tokens >= 1, heads >= 1, head_dim % 8 == 0)"),
    ("per_token_group_quant_fp8", "16x100", "shape 16x100 of per_token_group_quant_fp8: hidden % group == 0 does "
     "not hold (the spec's constraints: tokens >= 1, hidden % group == 0)"),
    ("rotary_embedding", "paper", "--shapes paper: rotary_embedding has no shapes in that set; its sets with "
     "shapes: quick, models, edge, held_out"),
]


@pytest.mark.parametrize("op, shapes, message", SHAPES)
def test_bench_refuses_a_bad_shape_before_any_build(nothing_runs, op, shapes, message):
    assert one_line(["bench", op, f"--shapes={shapes}"]) == message


@pytest.mark.parametrize("op, shapes, message", [s for s in SHAPES if s[1] != "paper"])
def test_optimize_and_patch_verify_refuse_the_same_shapes(nothing_runs, op, shapes, message):
    assert one_line(["optimize", op, f"--shapes={shapes}", "--gpus", "0"]) == message
    if (patches_dir() / op).is_dir():
        assert one_line(["patch", "verify", op, f"--shapes={shapes}"], prefix="Error: ") == message


def test_a_dim_the_spec_lets_be_zero_may_be_zero(nothing_runs):
    from astra_sglang.errors import AstraError
    from astra_sglang.specs.registry import get_spec, resolve_shapes

    spec = get_spec("extend_attention")  # "prefix >= 0": an extend with nothing cached
    assert spec.zero_dims == {"prefix"}
    assert resolve_shapes(spec, "16x0x32x8x128") == [(16, 0, 32, 8, 128)]
    with pytest.raises(AstraError, match="^shape 16x-1x32x8x128 of extend_attention: prefix is -1; it is at least 0$"):
        resolve_shapes(spec, "16x-1x32x8x128")
    with pytest.raises(AstraError, match="^shape 16x16x32x0x128 of extend_attention: kv_heads is 0; it is at least 1$"):
        resolve_shapes(spec, "16x16x32x0x128")


# -- -D knobs ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("define, message", [
    ("THREADS", "-D THREADS: give THREADS a value, NAME=VALUE (e.g. -D THREADS=256)"),
    ("THREADS=", "-D THREADS=: give THREADS a value, NAME=VALUE (e.g. -D THREADS=256)"),
    ("1X=2", "-D 1X=2: '1X' is not a macro name (letters, digits and _, not starting with a digit); write "
             "NAME=VALUE, e.g. -D THREADS=256"),
    ("=3", "-D =3: '' is not a macro name (letters, digits and _, not starting with a digit); write NAME=VALUE, "
           "e.g. -D THREADS=256"),
    ("THREADS=100", "-D THREADS=100: patches/silu_and_mul declares THREADS as one of 64, 128, 256, 512 (its "
                    "`// astra:knob` line)"),
    ("VPT=four", "-D VPT=four: patches/silu_and_mul declares VPT as one of 1, 2, 4 (its `// astra:knob` line)"),
])
def test_bench_refuses_a_bad_define(nothing_runs, define, message):
    assert one_line(["bench", "silu_and_mul", "-D", define]) == message


def test_a_knob_of_a_given_candidate_and_other_defines(nothing_runs, tmp_path):
    cu = tmp_path / "mine.cu"
    cu.write_text("// astra:knob BLOCK 128 256\n__global__ void k() {}\n")
    assert one_line(["bench", "silu_and_mul", "--candidate", cu, "-D", "BLOCK=512"]) == (
        f"-D BLOCK=512: {cu} declares BLOCK as one of 128, 256 (its `// astra:knob` line)")
    from astra_sglang.baselines.defaults import candidate_side

    side = candidate_side("silu_and_mul", str(cu), {"BLOCK": "0x100", "MY_FLAG": "1"})  # not a knob: passed on
    assert side.defines == {"BLOCK": "0x100", "MY_FLAG": "1"}


# -- py: sides ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, message", [
    ("py:nomodule:fn", "py:nomodule:fn: no module named 'nomodule' is installed here"),
    ("py:os:nofn", "py:os:nofn: module os has no attribute 'nofn'"),
    ("py:os:sep", "py:os:sep: os.sep is a str, not a function"),
    ("py:broken_op:fn", "py:broken_op:fn: importing broken_op fails: RuntimeError: needs a GPU"),
    ("py:bad", "py:bad: write py:MODULE:FUNCTION, e.g. py:sgl_kernel:rmsnorm"),
])
def test_python_sides_resolve_before_any_build(nothing_runs, tmp_path, monkeypatch, given, message):
    (tmp_path / "broken_op.py").write_text("raise RuntimeError('needs a GPU')\n")
    monkeypatch.chdir(tmp_path)  # the child that imports it starts here, as `python -m` puts the folder first
    assert one_line(["bench", "silu_and_mul", "--baseline", given]) == f"--baseline {message}"
    assert one_line(["bench", "silu_and_mul", "--candidate", given]) == f"--candidate {message}"
    assert one_line(["optimize", "silu_and_mul", "--baseline", given, "--gpus", "0"]) == f"--baseline {message}"


def test_a_python_side_that_resolves_and_missing_files(nothing_runs, tmp_path):
    from astra_sglang.baselines.resolve import resolve_python

    resolve_python("py:os:getcwd")  # no error
    assert one_line(["bench", "silu_and_mul", "--baseline", tmp_path / "no.cu"]) == (
        f"--baseline {tmp_path / 'no.cu'}: no such file (a kernel .cu, py:MODULE:FUNCTION, 'sglang' or 'reference')")
    assert one_line(["bench", "silu_and_mul", "--candidate", tmp_path / "no.cu"]) == (
        f"--candidate {tmp_path / 'no.cu'}: no such file (a kernel .cu, or py:MODULE:FUNCTION)")
    assert one_line(["bench", "silu_and_mul", "--candidate", "py:os:getcwd", "-D", "X=1"]) == (
        "--candidate py:os:getcwd is a Python op: -D knobs are for a kernel .cu")


# -- the model a server starts with ------------------------------------------------------------------------------

@pytest.fixture
def models(tmp_path):
    empty, dummy, full = tmp_path / "empty", tmp_path / "dummy", tmp_path / "full"
    for folder in (empty, dummy, full):
        folder.mkdir()
    (dummy / "config.json").write_text("{}")
    (full / "config.json").write_text("{}")
    (full / "model.safetensors").write_bytes(b"")
    return {"empty": empty, "dummy": dummy, "full": full, "file": dummy / "config.json"}


@pytest.mark.parametrize("command", ["launch", "profile"])
@pytest.mark.parametrize("model, extra, message", [
    ("/nonexistent", [], "--model-path /nonexistent: no such folder (a local model folder holding config.json, or a "
                         "Hugging Face hub id such as meta-llama/Llama-3.1-8B-Instruct)"),
    ("./nope", [], "--model-path ./nope: no such folder (a local model folder holding config.json, or a Hugging Face "
                   "hub id such as meta-llama/Llama-3.1-8B-Instruct)"),
    ("empty", [], "--model-path {path}: the folder holds no config.json (SGLang reads the model's architecture from "
                  "it)"),
    ("dummy", [], "--model-path {path}: no weights in the folder (*.safetensors, *.bin, *.pt, *.pth, *.gguf); add "
                  "--load-format dummy for random weights of the model's shapes"),
    ("file", ["--load-format", "dummy"], "--model-path {path}: a file; give the model's folder (config.json, "
                                         "tokenizer, weights)"),
])
def test_the_model_path_is_checked_before_sglang_starts(nothing_runs, models, command, model, extra, message):
    path = models.get(model, model)
    prefix = {"launch": "Error: ", "profile": "error: "}[command]
    args = [command, *(["--dry-run"] if command == "launch" else []), "--", "--model-path", path, *extra]
    assert one_line(args, prefix=prefix) == message.format(path=path)


def test_ab_checks_its_model_path_first(nothing_runs, tmp_path):
    assert one_line(["ab", "--model-path", "/nonexistent", "--out", tmp_path / "o"], prefix="Error: ") == (
        "--model-path /nonexistent: no such folder (a local model folder holding config.json, or a Hugging Face hub "
        "id such as meta-llama/Llama-3.1-8B-Instruct)")


@pytest.mark.parametrize("args, message", [
    (["--design", "crossover", "--gpus", "x,y"], "--gpus x,y: 'x' is no GPU; give indices such as 0,1 (or GPU UUIDs)"),
    (["--design", "crossover", "--gpus", "0"], "the crossover design needs two GPUs (--gpus 0,1), got 1"),
    (["--design", "restarts", "--runs", "2"], "the restarts design needs at least 3 starts per arm (--runs), got 2: "
                                              "the interval's unit is the start"),
])
def test_ab_checks_its_design_before_the_build(nothing_runs, models, tmp_path, args, message):
    model = ["--model-path", models["dummy"], "--load-format", "dummy", "--out", tmp_path / "o"]
    assert one_line(["ab", *model, *args], prefix="Error: ") == message


def test_a_hub_id_is_passed_on_with_a_note(models, monkeypatch):
    from astra_sglang.errors import AstraError
    from astra_sglang.serving.model import check_model, check_server_args

    notes = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    check_model("meta-llama/Llama-3.1-8B", None, notes.append)
    assert notes == ["--model-path meta-llama/Llama-3.1-8B is no folder here: SGLang will fetch it as a Hugging Face "
                     "hub id, which needs network access (and the weights, unless --load-format dummy)"]
    check_server_args(["--model", str(models["full"])], notes.append)  # a whole local model: nothing to say
    check_server_args(["--model-path", str(models["dummy"]), "--load-format=dummy"], notes.append)
    assert len(notes) == 1
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AstraError, match="HF_HUB_OFFLINE is set while the hub id is not in the local"):
        check_model("meta-llama/Llama-3.1-8B")
    with pytest.raises(AstraError, match=r"^the server's arguments need --model-path \(after --"):
        check_server_args(["--port", "1"], required=True)


# -- recorded calls (onboard --shapes, launch --record-calls output) ---------------------------------------------

def _call(dtype="bfloat16", shape=(16, 8192)):
    return {"tensors": {"x": {"shape": list(shape), "dtype": dtype}}}


@pytest.mark.parametrize("calls, message", [
    ([_call(), _call(dtype="bfloat17")], "calls[1]: tensors.x.dtype: unknown dtype 'bfloat17'; known: float32, "
     "float16, bfloat16, float64, int8, int32, int64, uint8, bool, float8_e4m3fn, float8_e5m2"),
    ([_call(shape=(-16, 8192))], "calls[0]: tensors.x.shape: size -16 at dim 0 is negative"),
    ([_call(), {"tensors": {"x": {"shape": [16, 8192]}}}], "calls[1]: tensors.x.dtype: Field required"),
    ([{"scalars": {"eps": 1e-6}}], "calls[0]: tensors: Field required"),
    ([_call(shape=(16, "a"))], "calls[0]: tensors.x.shape.1: Input should be a valid integer, unable to parse string "
                               "as an integer"),
    ([3], "calls[0]: Input should be a valid dictionary or instance of CallRecord"),
])
def test_recorded_calls_are_checked_per_call_and_field(nothing_runs, tmp_path, calls, message):
    path = tmp_path / "calls.json"
    path.write_text(json.dumps(calls))
    # the calls are read before the entry point is imported: a bad file is said first
    assert one_line(["onboard", "nomodule:fn", "--shapes", path]) == (
        f"{path} is not a list of recorded calls: {message}")


def test_recorded_calls_that_are_no_list(nothing_runs, tmp_path):
    path = tmp_path / "calls.json"
    path.write_text('{"calls": 3}')
    assert one_line(["onboard", "nomodule:fn", "--shapes", path]) == (
        f'{path} is not a list of recorded calls: write a JSON list of calls (or {{"calls": [...]}}), each '
        '{"tensors": {"x": {"shape": [16, 8192], "dtype": "bfloat16"}}}')
    path.write_text('{"calls": []}')
    assert one_line(["onboard", "nomodule:fn", "--shapes", path]) == f"{path} records no call"


def test_a_server_records_dtypes_no_spec_knows():
    from astra_sglang.specs.calls import CallRecord

    call = CallRecord.model_validate({"tensors": {"scale": {"shape": [4, 8], "dtype": "float8_e8m0fnu"}}})
    assert call.tensors["scale"].dtype == "float8_e8m0fnu"  # recorded as the server passed it; refused on reading


# -- no GPU: the tuner and the agents say so before building -----------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--tuner", "--gpus", "none"], "no CUDA GPU to evaluate on (--gpus none, and torch sees no CUDA device): the "
     "tuner's candidates are checked and timed on one; run where one is, or give --ray workers that have one"),
    (["--llm", "m", "--base-url", "http://127.0.0.1:9"], "no CUDA GPU to evaluate on (torch sees no CUDA device): "
     "the agents' candidates are checked and timed on one; run where one is, or give --ray workers that have one, "
     "or --compile-only to build the candidates only"),
])
def test_optimize_without_a_gpu_says_so_before_any_build(nothing_runs, monkeypatch, args, message):
    from astra_sglang.optimize.pool import devices

    if devices.probe().name:
        pytest.skip("this machine has a GPU")
    monkeypatch.setattr(devices, "visible_gpus", lambda requested=None: [])  # nvidia-smi may list one torch cannot use
    assert one_line(["optimize", "silu_and_mul", *args]) == message


@pytest.mark.parametrize("args, message", [
    (["--gpus", "x,1"], "--gpus x,1: 'x' is no GPU; give indices such as 0,1 (or GPU UUIDs), or none"),
    (["--ray", "nosuch://x"], "--ray nosuch://x: give auto (the cluster this machine belongs to), local, "
                              "ray://HEAD:10001 or HEAD:6379"),
    (["--gpus", "0", "--out", "/dev/null/run"], "--out: cannot create /dev/null/run: Not a directory"),
])
def test_optimize_refuses_bad_options_first(nothing_runs, args, message):
    assert one_line(["optimize", "silu_and_mul", *args]) == message


@pytest.mark.parametrize("args, message", [
    (["fused_moe", "--shape", "-8x14336x4096x2"], "shape 1x-8x14336x4096x2 of fused_moe: experts is -8; it is at "
                                                  "least 1"),
    (["fused_moe", "--shape", "8x14336x4096x9"], "shape 1x8x14336x4096x9 of fused_moe: topk <= experts does not hold "
     "(the spec's constraints: tokens >= 1, topk >= 1, topk <= experts, inter % 8 == 0, hidden % 8 == 0)"),
    (["decode_attention", "--shape", "32x0x128"], "bad --shape '32x0x128': q heads, kv heads and head dim are at "
                                                  "least 1"),
    (["decode_attention", "--shape", "32x8x100"], "shape 1x512x32x8x100 of decode_attention: head_dim in (64, 128, "
     "256) does not hold (the spec's constraints: batch >= 1, kv_len >= 1, kv_heads >= 1, heads % kv_heads == 0, "
     "heads // kv_heads >= 2, head_dim in (64, 128, 256))"),
])
def test_tune_checks_its_shapes_against_the_ops_spec_first(nothing_runs, args, message):
    assert one_line(["tune", *args]) == message


def test_tune_without_a_gpu_says_so_before_any_build(nothing_runs):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert one_line(["tune", "fused_moe", "--shape", "8x14336x4096x2"]) == (
        "tuning needs a CUDA GPU: every config is checked and timed on it; none is visible here")


# -- the other options a new user gets wrong ---------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["bench", "silu_and_mul", "--dtypes", ","], "--dtypes ',' names no dtype; silu_and_mul runs over bfloat16, "
                                                 "float16, float32"),
    (["bench", "silu_and_mul", "--out", "/dev/null/r.jsonl"], "--out: /dev/null is a file, not a folder"),
    (["onboard", "m:f", "--shapes", "c.json", "--name", "bad-name"], "--name 'bad-name': a spec name is an identifier "
     "(letters, digits and _, not starting with a digit): it names the spec file and the op in every command"),
    (["profile", "--from-traces", "decode=x", "--model-config", "/etc/hostname"],
     "--model-config /etc/hostname: not a model's config.json (Expecting value: line 1 column 1 (char 0))"),
    (["profile", "--", "--load-format", "dummy"], "the server's arguments need --model-path (after --, e.g. -- "
                                                  "--model-path M --load-format dummy)"),
    (["tune", "decode_attention", "--model", "llama-3-8b", "--lengths", "x", "--profile", __file__],
     "bad --lengths 'x': sizes joined by ',', e.g. 1024,4096"),
])
def test_other_bad_options(nothing_runs, args, message, monkeypatch):
    if args[0] == "tune":
        monkeypatch.setattr("astra_sglang.profile.buckets.profile_buckets", lambda *a, **k: [(1, 10)])
    assert one_line(args) == message


@pytest.mark.parametrize("args, option", [
    (["launch", "--dry-run", "--stats-dir", "/dev/null/st"], "--stats-dir"),
    (["launch", "--dry-run", "--record-calls", "sglang.srt.layers.activation:gelu_and_mul", "--record-out",
      "/dev/null/c.json"], "--record-out"),
])
def test_a_folder_the_server_writes_must_be_writable(nothing_runs, args, option):
    assert one_line(args, prefix="Error: ").startswith(f"{option} /dev/null")


@pytest.mark.parametrize("args", [
    ["bench", "silu_and_mul", "--timeout", "0"],
    ["optimize", "silu_and_mul", "--rounds", "0"],
    ["optimize", "silu_and_mul", "--budget-usd", "-1"],
    ["tune", "fused_moe", "--tp", "0"],
    ["profile", "--steps", "0"],
    ["profile", "--url", "ftp://host"],
    ["profile", "--url", "host:port"],
])
def test_click_refuses_out_of_range_values(nothing_runs, args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "Invalid value for" in result.output, result.output


def test_no_traceback_for_a_command_line_that_names_nothing(nothing_runs):
    assert one_line(["optimize"]) == "name the ops to optimize one way: KERNEL..., --all, or --from-profile PROFILE.json"
    assert sys.modules.get("astra_sglang.cli") is not None


def test_a_gpu_torch_sees_is_enough_where_none_is_listed(monkeypatch):
    """No nvidia-smi on the path (or --gpus none): the evaluations' children still see the GPU torch sees."""
    from astra_sglang.optimize import preflight
    from astra_sglang.optimize.pool import devices

    monkeypatch.setattr(devices, "visible_gpus", lambda requested=None: [])
    monkeypatch.setattr(devices, "probe", lambda gpu=None: devices.GpuFacts(name="NVIDIA H100 80GB HBM3"))
    run = preflight.Preflight(ops=["silu_and_mul"], shapes="paper", baseline=None, gpus=None, ray=None, llm=False,
                              compile_only=False)
    preflight.check_harness(run)  # no error
