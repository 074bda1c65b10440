"""What the two servers of a paired A/B resolved differently (serving/settings.py): /server_info replies
flattened and compared, ports and load counters aside, written beside the rounds and shown in the report."""
from __future__ import annotations

import json

from astra_sglang.serving import paired as paired_mod
from astra_sglang.serving import report, settings

# The shape of SGLang 0.5.17's /server_info: server args at the top, per-scheduler state in a list.
INFO = {"port": 31000, "host": "127.0.0.1", "cuda_graph_max_bs": 64, "cuda_graph_bs": [1, 2, 4, 8, 16, 32, 64],
        "chunked_prefill_size": 8192, "max_total_num_tokens": 200000, "mem_fraction_static": 0.4,
        "internal_states": [{"memory_usage": {"weight": 4.52, "kvcache": 24.41, "graph": 0.53},
                             "last_gen_throughput": 1234.5, "#running-req": 3}], "version": "0.5.17"}


def _other(**changes) -> dict:
    other = json.loads(json.dumps(INFO))
    other.update(port=31001, **changes)
    other["internal_states"][0]["last_gen_throughput"] = 99.0
    return other


def test_identical_servers_differ_in_nothing_but_ports_and_load():
    assert settings.differences(INFO, _other()) == []
    assert settings.summary([], True) == "settings: A and B resolved the same settings (ports aside)"


def test_every_resolved_difference_is_named_with_its_path():
    other = _other(cuda_graph_bs=[1, 2, 4, 8, 16, 32], chunked_prefill_size=4096)
    other["internal_states"][0]["memory_usage"]["graph"] = 0.31
    other["internal_states"][0]["memory_usage"]["kvcache"] = 24.42  # within 1%: rounding, not a setting
    diffs = settings.differences(INFO, other)
    assert [(d.key, d.a, d.b) for d in diffs] == [
        ("chunked_prefill_size", 8192, 4096), ("cuda_graph_bs", [1, 2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 16, 32]),
        ("internal_states.0.memory_usage.graph", 0.53, 0.31)]
    line = settings.summary(diffs, True)
    assert line.startswith("settings: A and B resolved 3 differently: chunked_prefill_size: 8192 vs 4096")
    only_a = settings.differences({**INFO, "enable_x": True}, _other())
    assert [(d.key, d.a, d.b) for d in only_a] == [("enable_x", True, None)]


def test_a_paired_run_writes_the_comparison_and_the_report_shows_it(tmp_path, monkeypatch):
    infos = {31000: INFO, 31001: _other(cuda_graph_bs=[1, 2, 4])}
    monkeypatch.setattr(paired_mod.server, "server_info", lambda port: infos[port])
    a = paired_mod.PairedArm("A", 31000, ["a"], {})
    b = paired_mod.PairedArm("B", 31001, ["b"], {})
    monkeypatch.setattr(paired_mod.server, "start_server", lambda argv, env, log: argv[0])
    monkeypatch.setattr(paired_mod.server, "wait_healthy", lambda proc, port, log, timeout: 1.0)
    for arm in (a, b):
        paired_mod.start_arm(arm, tmp_path, 10)
    diffs = settings.differences(a.info, b.info)
    settings.write(tmp_path, diffs, True)
    saved = settings.read(tmp_path)
    assert saved["compared"] and saved["differences"] == [{"key": "cuda_graph_bs", "a": [1, 2, 4, 8, 16, 32, 64],
                                                           "b": [1, 2, 4]}]
    rows = [{"arm": arm, "run": 1, "repeat": 1, "metrics": {"output_throughput": 100.0}, "outputs": None,
             "paired": True, "order": "AB"} for arm in "AB"]
    text = report.render(rows, [], setting_diffs=saved)
    assert "| `cuda_graph_bs` | [1, 2, 4, 8, 16, 32, 64] | [1, 2, 4] |" in text
    assert "Settings: a server's /server_info was unavailable" in report.render(
        rows, [], setting_diffs={"compared": False, "differences": []})
    assert "Settings" not in report.render(rows, [])  # an unpaired or older run: nothing said
