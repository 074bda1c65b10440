"""`astra-sglang profile` on CPU: trace parsing, attribution, ranking and headroom, the JSON as a shape source,
the in-place comparison and the command's error paths. The traces in tests/fixtures/profile/ were recorded
from a real SGLang 0.5.17 server (dummy 8-layer Llama-3-8B shapes, triton attention, H100, 2026-11-24,
`bash benchmarks/gpu/profile_run.sh`) and trimmed by `astra_sglang.profile.trace.trim` to 4 steps a phase."""
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from astra_sglang.cli import main
from astra_sglang.profile.attribute import owner, short_name
from astra_sglang.profile.build import build_profile, phase_steps
from astra_sglang.profile.ceilings import Ceilings
from astra_sglang.profile.compare import compare
from astra_sglang.profile.rank import ModelDims, phase_rows, spec_shape
from astra_sglang.profile.records import Profile
from astra_sglang.profile.trace import load, trim
from astra_sglang.specs.registry import get_spec, resolve_shapes

FIXTURES = Path(__file__).parents[1] / "fixtures" / "profile"
DECODE, PREFILL = FIXTURES / "decode.trace.json.gz", FIXTURES / "prefill.trace.json.gz"
CONFIG = FIXTURES / "llama3-8b-8layers.config.json"
H100 = Ceilings(gpu="NVIDIA H100 80GB HBM3", roofline_gbps=2801.0, empty_us=0.94)


def dims():
    return ModelDims.from_config(CONFIG)


def test_steps_phases_and_launches_are_read():
    trace = load(DECODE)
    assert [(s.phase, s.batch, s.tokens) for s in trace.steps] == [("decode", 64, 64)] * 4
    assert len(trace.kernels) > 300 and all(k.correlation in trace.launches for k in trace.kernels[:50])
    mixed = load(PREFILL)
    assert {s.phase for s in mixed.steps} == {"prefill", "decode"}
    assert max(s.tokens for s in mixed.steps if s.phase == "prefill") == 8192  # SGLang's chunked prefill size


@pytest.mark.parametrize("name, short, kind, op", [
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", "FusedAddRMSNormKernel",
     "spec", "fused_add_rmsnorm"),
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ((anonymous namespace)::ActivationKind)0, "
     "true>((anonymous namespace)::ActivationParams)", "act_and_mul_kernel", "spec", "silu_and_mul"),
    ("void (anonymous namespace)::far_reg_kernel<__nv_bfloat16, 8, 512, 1, 1, true>(x)", "far_reg_kernel", "spec",
     "fused_add_rmsnorm"),  # our shipped kernel, found in patches/ (its __launch_bounds__ has nested parentheses)
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ((anonymous namespace)::ActivationKind)2, "
     "true>((anonymous namespace)::ActivationParams)", "act_and_mul_kernel", "spec", "gelu_tanh_and_mul"),
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ((anonymous namespace)::ActivationKind)1, "
     "true>((anonymous namespace)::ActivationParams)", "act_and_mul_kernel", "spec", "gelu_and_mul"),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &gelu_tanh>(__nv_bfloat16*)",
     "act_and_mul_kernel", "spec", "gelu_tanh_and_mul"),  # sgl-kernel's, for unaligned widths
    ("void (anonymous namespace)::act_mul_kernel<(anonymous namespace)::GeluTanh, __nv_bfloat16, 8, 64, 1, true>(x)",
     "act_mul_kernel", "spec", "gelu_tanh_and_mul"),  # ours, built from silu_and_mul's file
    ("void (anonymous namespace)::act_mul_kernel<(anonymous namespace)::Gelu, float, 4, 256, 1, true>(x)",
     "act_mul_kernel", "spec", "gelu_and_mul"),
    ("void (anonymous namespace)::act_mul_kernel<(anonymous namespace)::Silu, float, 4, 256, 1, true>(x)",
     "act_mul_kernel", "spec", "silu_and_mul"),
    # flashinfer passes Gemma's 1 + weight at run time: the name cannot tell, the plain op is named
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(x)", "RMSNormKernel", "spec", "rmsnorm"),
    ("gelu_quick_kernel", "gelu_quick_kernel", "sglang", "gelu (other forms)"),
    ("nvjet_sm90_tst_224x64_64x5_2x1_v_bz_TNN", "nvjet_sm90_tst_224x64_64x5_2x1_v_bz_TNN", "library", "GEMM"),
    ("_fwd_grouped_kernel_stage1", "_fwd_grouped_kernel_stage1", "spec", "decode_attention"),
    ("_fwd_kernel_stage2", "_fwd_kernel_stage2", "sglang", "decode attention (Triton)"),
    # SGLang's fused rope: an op with a spec (extract/rotary_embedding.toml) since specs describe int64 positions
    ("void (anonymous namespace)::fused_rope_kernel<true, 128l>(p)", "fused_rope_kernel", "spec", "rotary_embedding"),
    ("void at::native::vectorized_elementwise_kernel<4, F>(int, F)", "vectorized_elementwise_kernel", "other",
     "PyTorch glue"),
    # sgl-kernel's topk_softmax: one kernel for power-of-two expert counts, two (a softmax into a workspace, then
    # the top-k) otherwise; the softmax's name must not fall to the sampling rule. Then our own kernel.
    ("void topkGatingSoftmax<__nv_bfloat16, 8, 128, 4, 16>(__nv_bfloat16 const*, bool const*, float*, int, int*, int, "
     "int, int, bool, float, float const*)", "topkGatingSoftmax", "spec", "topk_softmax"),
    ("void moeSoftmax<__nv_bfloat16, 256>(__nv_bfloat16 const*, bool const*, float*, int, float, float const*)",
     "moeSoftmax", "spec", "topk_softmax"),
    ("void moeTopKFast<256>(float*, bool const*, float*, int*, int, int, int, int, bool)", "moeTopKFast", "spec",
     "topk_softmax"),
    ("void moeTopK<256>(float*, bool const*, float*, int*, int, int, int, int, bool)", "moeTopK", "spec",
     "topk_softmax"),
    ("void (anonymous namespace)::topk_softmax_kernel<__nv_bfloat16, 16, 8, 8, 1, true>(float*, int*, "
     "__nv_bfloat16 const*, int, int, int, bool, long, long, long)", "topk_softmax_kernel", "spec", "topk_softmax"),
])
def test_every_kernel_names_something_actionable(name, short, kind, op):
    assert short_name(name) == short
    who = owner(name)
    assert (who.kind, who.op) == (kind, op) and who.action


def test_decode_ranking_with_shapes_bytes_and_headroom():
    phase = phase_rows(load(DECODE), "decode", dims(), H100.roofline_gbps, H100.empty_us)
    assert phase.steps == 4 and phase.tokens_per_step == 64
    assert phase.rows == sorted(phase.rows, key=lambda r: -r.total_us)
    assert sum(r.share for r in phase.rows) == pytest.approx(1.0)
    gemm = sum(r.share for r in phase.rows if r.op == "GEMM")
    assert gemm > 0.6  # the decode step is the GEMMs' (84% at 30 steps on the same server)
    norm = next(r for r in phase.rows if r.op == "fused_add_rmsnorm")
    assert norm.calls == 4 * 16 and norm.bytes_per_step == 16 * get_spec("fused_add_rmsnorm").min_bytes((64, 4096),
                                                                                                          "bfloat16")
    assert 0 < norm.pct_roofline < 100 and 0 < norm.gain_pct < 100 * norm.share
    assert all(r.gain_pct is None for r in phase.rows if r.kind != "spec")  # unknown bytes are said, not guessed
    assert {o.op: o.shapes for o in phase.ops} == {"fused_add_rmsnorm": [(64, 4096)], "silu_and_mul": [(64, 14336)],
                                                   "rmsnorm": [(64, 4096)], "rotary_embedding": [(64, 32, 8, 128)]}


def test_prefill_steps_take_their_token_counts():
    phase = phase_rows(load(PREFILL), "prefill", dims(), H100.roofline_gbps, H100.empty_us)
    shapes = {o.op: set(o.shapes) for o in phase.ops}
    assert shapes["silu_and_mul"] == {(8192, 14336), (3328, 14336), (1792, 14336), (5376, 14336)}
    silu = next(r for r in phase.rows if r.op == "silu_and_mul")
    assert silu.pct_roofline > 80  # a large memory-bound op: near the copy roofline, little to gain
    assert silu.gain_pct < 0.5


def test_spec_shapes_follow_the_model_and_tensor_parallel_size():
    assert spec_shape("silu_and_mul", 7, dims()) == (7, 14336)
    assert spec_shape("silu_and_mul", 7, ModelDims.from_config(CONFIG, tp=2)) == (7, 7168)
    assert spec_shape("merge_attn_states_lse", 3, ModelDims.from_config(CONFIG, tp=4)) == (3, 8, 128)
    assert spec_shape("fused_add_rmsnorm", 5, ModelDims.from_config(CONFIG, tp=4)) == (5, 4096)  # hidden not sharded


def test_profile_json_is_a_shape_source(tmp_path):
    profile = build_profile({"decode": [DECODE], "prefill": [PREFILL]}, dims(), H100)
    path = tmp_path / "profile.json"
    path.write_text(profile.model_dump_json())
    again = Profile.model_validate_json(path.read_text())
    assert [p.name for p in again.phases] == ["decode", "prefill"]
    shapes = resolve_shapes(get_spec("fused_add_rmsnorm"), str(path))
    assert shapes[0] == (64, 4096) and (8192, 4096) in shapes
    with pytest.raises(Exception, match="records no call of merge_attn_states_lse"):
        resolve_shapes(get_spec("merge_attn_states_lse"), str(path))


def test_compare_scales_to_the_base_tokens_per_step():
    base = build_profile({"prefill": [PREFILL]}, dims(), H100)
    same = compare(base, base)[0]
    assert same.scale == 1.0 and all(o.change_pct == 0 for o in same.ops)
    doubled = base.model_copy(deep=True)
    ph = doubled.phases[0]
    ph.tokens_per_step *= 2  # twice the tokens in twice the time: no change per token
    for row in ph.rows:
        row.per_step_us *= 2
    delta = compare(base, doubled)[0]
    assert delta.scale == pytest.approx(0.5)
    silu = next(o for o in delta.ops if o.op == "silu_and_mul")
    assert silu.change_pct == pytest.approx(0.0, abs=1e-9)
    assert [o.kind for o in delta.ops][:3] == ["spec"] * 3  # the spec ops first
    assert same.same_batch and not delta.same_batch  # twice the tokens a step: not the same batches
    nearly = base.model_copy(deep=True)
    nearly.phases[0].tokens_per_step *= 1.2
    assert compare(base, nearly)[0].same_batch


def test_step_wall_has_its_median_and_longest_step_beside_the_mean(tmp_path):
    trace = load(DECODE)
    steps = [s.dur for s in trace.steps if s.phase == "decode"]
    phase = phase_rows(trace, "decode", dims(), H100.roofline_gbps, H100.empty_us)
    assert phase.step_wall_us == pytest.approx(sum(steps) / len(steps))
    assert phase.step_wall_median_us == pytest.approx(sorted(steps)[len(steps) // 2] if len(steps) % 2 else
                                                      sum(sorted(steps)[len(steps) // 2 - 1:len(steps) // 2 + 1]) / 2)
    assert phase.step_wall_max_us == max(steps)
    # One step that waited (a JIT compile) moves the mean, not the median: the comparison carries both.
    base = build_profile({"decode": [DECODE]}, dims(), H100)
    slow = base.model_copy(deep=True)
    ph = slow.phases[0]
    ph.step_wall_us += 60_000 / ph.steps
    ph.step_wall_max_us += 60_000
    delta = compare(base, slow)[0]
    assert delta.wall_after_us > delta.wall_before_us and delta.wall_median_after_us == delta.wall_median_before_us
    (tmp_path / "base.json").write_text(base.model_dump_json())
    again = Profile.model_validate_json((tmp_path / "base.json").read_text())
    assert again.phases[0].step_wall_median_us == phase.step_wall_median_us
    old = json.loads(base.model_dump_json())  # a profile written before the median was kept still loads
    for p in old["phases"]:
        del p["step_wall_median_us"], p["step_wall_max_us"]
    assert Profile.model_validate(old).phases[0].step_wall_median_us == 0.0


def test_trim_keeps_what_the_parser_reads(tmp_path):
    out = trim(PREFILL, tmp_path / "t.trace.json.gz", max_steps=1)
    trace = load(out)
    assert sorted(s.phase for s in trace.steps) == ["decode", "prefill"]
    assert trace.kernels and all(trace.step_of(k) for k in trace.kernels)


def test_cli_from_traces_writes_the_report(tmp_path):
    result = CliRunner().invoke(main, ["profile", "--from-traces", f"decode={DECODE}", "--from-traces",
                                       f"prefill={PREFILL}", "--model-config", str(CONFIG), "--roofline-gbps", "2801",
                                       "--empty-us", "0.94", "--gpu", "NVIDIA H100 80GB HBM3", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "profile.md").read_text()
    assert "## decode: 4 steps, 64 tokens a step" in text and "FusedAddRMSNormKernel" in text
    assert "a cuBLAS/CUTLASS GEMM: not a target of this tool" in text
    again = CliRunner().invoke(main, ["profile", "--report", str(tmp_path / "profile.json"), "--compare",
                                      str(tmp_path / "profile.json"), "--out", str(tmp_path / "r")])
    assert again.exit_code == 0 and "in place" in (tmp_path / "r" / "profile.md").read_text()
    assert "Not comparable" not in (tmp_path / "r" / "profile.md").read_text()  # the same run: the same batches
    other = Profile.model_validate_json((tmp_path / "profile.json").read_text())
    other.phases[0].tokens_per_step = 1.0  # a decode profile that caught steps of one request
    (tmp_path / "one.json").write_text(other.model_dump_json())
    mixed = CliRunner().invoke(main, ["profile", "--report", str(tmp_path / "one.json"), "--compare",
                                      str(tmp_path / "profile.json"), "--out", str(tmp_path / "m")])
    assert mixed.exit_code == 0 and "different batches (64 vs 1 tokens a step)" in mixed.output.replace("\n", " ")
    assert "**Not comparable beyond the token-linear ops:**" in (tmp_path / "m" / "profile.md").read_text()


class _Server(BaseHTTPRequestHandler):
    """A stand-in SGLang server: /model_info answers; /start_profile per `profile_status`."""

    profile_status = 404

    def do_GET(self):  # noqa: N802
        if self.path == "/model_info":
            self._reply(200, {"model_path": "/nonexistent/model"})
        else:
            self._reply(404, {})

    do_POST = do_GET

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("args, message", [
    (["--url", "http://127.0.0.1:9"], "no SGLang server reachable at http://127.0.0.1:9"),
    ([], "give --url of a running server"),
    (["--from-traces", "decode"], "--from-traces wants PHASE=PATH"),
])
def test_bad_input_is_one_line(args, message, tmp_path):
    result = CliRunner().invoke(main, ["profile", "--out", str(tmp_path), *args])
    assert result.exit_code == 1 and message in result.output and len(result.output.strip().splitlines()) == 1


def test_a_server_without_the_profiling_endpoint(tmp_path):
    from astra_sglang.profile import drive

    httpd = HTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = drive.attach(f"http://127.0.0.1:{httpd.server_port}")
    try:
        with pytest.raises(Exception, match="has no /start_profile endpoint"):
            drive.start_profile(server, tmp_path, 5)
    finally:
        httpd.shutdown()


def test_an_empty_trace_is_an_error(tmp_path):
    empty = tmp_path / "e.trace.json.gz"
    with gzip.open(empty, "wt") as fh:
        json.dump({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 1}]}, fh)
    result = CliRunner().invoke(main, ["profile", "--from-traces", f"decode={empty}", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "holds no GPU kernels" in result.output


def test_waiting_for_traces_gives_up_with_the_folder(tmp_path):
    from astra_sglang.profile.drive import wait_traces

    with pytest.raises(Exception, match="no complete trace appeared"):
        wait_traces(tmp_path, timeout_s=1.5)
    with pytest.raises(Exception, match="the server died while profiling"):
        wait_traces(tmp_path, timeout_s=5, alive=lambda: False)


def test_phase_steps_counts_the_loads_own_phase():
    assert phase_steps([DECODE], "decode") == 4
    assert phase_steps([DECODE], "prefill") == 0
    mixed = load(PREFILL)
    assert phase_steps([PREFILL], "prefill") == sum(1 for s in mixed.steps if s.phase == "prefill") > 0
    assert phase_steps([], "decode") == 0


def test_a_triton_spec_kernel_says_tune():
    assert "astra-sglang tune decode_attention" in owner("_fwd_grouped_kernel_stage1").action
    assert "astra-sglang optimize rmsnorm" in owner("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(x)").action


@pytest.mark.parametrize("kernel", ["my_rows_kernel", "my_rows_kernel_v2"])
def test_a_user_patchs_kernel_is_attributed_to_its_op(kernel, tmp_path, monkeypatch):
    """A server launched with the user folder's patches runs their kernels: `profile` names their op."""
    from astra_sglang.paths import specs_dir
    from astra_sglang.profile import attribute

    home = tmp_path / "home"
    monkeypatch.setenv("ASTRA_SGLANG_HOME", str(home))
    monkeypatch.delenv("ASTRA_SGLANG_PATCHES", raising=False)
    (home / "specs").mkdir(parents=True)
    spec = (specs_dir() / "silu_and_mul.toml").read_text().replace('name = "silu_and_mul"', 'name = "my_rows"')
    (home / "specs" / "my_rows.toml").write_text(spec)
    (home / "patches" / "my_rows").mkdir(parents=True)
    (home / "patches" / "my_rows" / "kernel.cu").write_text(f"__global__ void {kernel}(float* out) {{}}\n")
    attribute.spec_kernels.cache_clear()
    try:
        who = owner(f"void {kernel}(float*)")
        assert (who.kind, who.op) == ("spec", "my_rows")
    finally:
        attribute.spec_kernels.cache_clear()


class _LoadedServer(BaseHTTPRequestHandler):
    """/model_info and /v1/loads of a server holding 40 running and 20 waiting requests over two ranks."""

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/v1/loads"):
            body = {"loads": [{"dp_rank": 0, "num_running_reqs": 30, "num_waiting_reqs": 10},
                              {"dp_rank": 1, "num_running_reqs": 10, "num_waiting_reqs": 10}]}
        elif self.path == "/model_info":
            body = {"model_path": "/m"}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("handler, held", [(_LoadedServer, 60), (_Server, None)])
def test_requests_held_reads_the_servers_loads_or_none_without_them(handler, held):
    from astra_sglang.profile import drive

    httpd = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        assert drive.requests_held(drive.Server(f"http://127.0.0.1:{httpd.server_port}", "/m")) == held
    finally:
        httpd.shutdown()


def test_the_profile_waits_until_the_batch_holds_the_loads_concurrency():
    from astra_sglang.profile.drive import Server, wait_filled

    seen = iter([1, 1, 30, 57, 64])  # the warm-up request, then the batch filling up
    calls = []

    def held(server):
        calls.append(1)
        return next(seen)

    assert wait_filled(Server("http://x:1", "/m"), 64, timeout_s=5, poll_s=0, held=held) == 57
    assert len(calls) == 4  # 57 >= 0.9 x 64: recording starts there, not at the warm-up's single request
    assert wait_filled(Server("http://x:1", "/m"), 64, timeout_s=5, poll_s=0, held=lambda s: None) is None
    assert wait_filled(Server("http://x:1", "/m"), 64, timeout_s=0.2, poll_s=0.05, held=lambda s: 3) == 3


@pytest.mark.parametrize("extra, concurrency", [([], 64), (["--concurrency", "1"], 1)])
def test_concurrency_replaces_the_loads_own(extra, concurrency, tmp_path, monkeypatch):
    """`--concurrency 1` profiles a decode at batch 1 (as a one-request client serves it); the load keeps its
    lengths and prompt count."""
    from astra_sglang.errors import AstraError
    from astra_sglang.profile import ceilings, drive

    seen = []

    def load(server, workload, out_dir, steps, alive=lambda: True):
        seen.append(workload)
        raise AstraError("stop here")  # what follows needs a server's traces
    monkeypatch.setattr(ceilings, "measure", lambda: None)
    monkeypatch.setattr(drive, "attach", lambda url: drive.Server(url, "/m"))
    monkeypatch.setattr(drive, "profile_load", load)
    result = CliRunner().invoke(main, ["profile", "--url", "http://127.0.0.1:1", "--workload", "decode", *extra,
                                       "--out", str(tmp_path)])
    assert result.exit_code == 1 and "stop here" in result.output
    assert [w.concurrency for w in seen] == [concurrency]
    assert seen[0].model_dump(exclude={"concurrency"}) == drive.WORKLOADS["decode"].model_dump(exclude={"concurrency"})
