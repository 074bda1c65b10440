"""The usage meter's reservation for a request of n answers: its prompt billed once, n answers of the mean answer
(the mean taken over answers, not requests), whether the model records a request of n or n requests of one."""
from __future__ import annotations

import pytest

from astra_sglang.optimize.agents.meter import CHARS_PER_TOKEN, BudgetExceeded, UsageMeter

MODEL = "m"
PRICE = {MODEL: (1.0, 10.0)}  # USD per 1M prompt / completion tokens


@pytest.mark.parametrize("recorded", ["one request of 4", "four requests of 1"])
def test_a_request_of_n_answers_reserves_its_prompt_once_and_n_mean_answers(recorded):
    meter = UsageMeter(budget_usd=1.0, prices=PRICE)
    if recorded == "one request of 4":  # OpenAIModel: one usage for all n answers
        meter.record(meter.charge(MODEL, 1000, 4 * 500), "t", MODEL, "chat", 1.0, n=4)
    else:  # ScriptedModel: a record per answer
        for i in range(4):
            meter.record(meter.charge(MODEL, 1000 if i == 0 else 0, 500), "t", MODEL, "scripted", 1.0)
    assert meter._expected(MODEL, 2000, 4) == (pytest.approx((2000 * 1.0 + 4 * 500 * 10.0) / 1e6), 2000 + 4 * 500)
    with meter.admit(MODEL, 2000 * CHARS_PER_TOKEN, n=4) as most:
        held = sum(c for c, _ in meter._reserved.values())
        assert held == pytest.approx(0.022)
        left = 1.0 - meter.total.cost_usd - 2000 * 1.0 / 1e6  # the prompt once
        assert most == int(left * 1e6 / 10.0 / 4)


def test_a_request_past_the_budget_is_refused():
    meter = UsageMeter(budget_usd=0.01, prices=PRICE)
    meter.record(meter.charge(MODEL, 1000, 800), "t", MODEL, "chat", 1.0)
    with pytest.raises(BudgetExceeded, match="this request"):
        with meter.admit(MODEL, 1000 * CHARS_PER_TOKEN, n=2):
            pass
