"""A kernel variant for the screening launch's plug-in test: SGLang's own fused_experts under the config, the
variant's extra knob checked and dropped (what a source-level knob's launch receives)."""


def fused_experts_same(hidden, w1, w2, topk_output, runner_config, config):
    from astra_sglang.triton.moe.op import _sglang

    fused_experts, override_config, _, _ = _sglang()
    config = dict(config)
    assert config.pop("SPLIT_K") == 1
    with override_config(config):
        fused_experts(hidden, w1, w2, topk_output, moe_runner_config=runner_config)
