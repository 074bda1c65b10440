"""The per-GPU memory ledger (harness/budget.py): evaluations sharing a GPU never hold more than its share
together, however many start at once; a dead process's claim is dropped."""
import multiprocessing

import pytest

from astra_sglang.harness import budget
from astra_sglang.harness.budget import MemoryLedger
from astra_sglang.harness.limits import GPU_MEMORY_SHARE, TIMING_MEMORY_CAP, TIMING_MEMORY_FRACTION

GIB = 1 << 30
TOTAL = 80 * GIB


def _ledger(tmp_path, pid):
    return MemoryLedger(key="GPU-test", total=TOTAL, folder=tmp_path, pid=pid)


@pytest.fixture
def live(monkeypatch):
    """Fake pids 1..99 count as live processes; others as gone."""
    alive = set(range(1, 100))
    monkeypatch.setattr(budget, "_alive", lambda pid: pid in alive)
    return alive


def test_one_evaluation_gets_its_want_within_the_cap_and_the_free_memory(tmp_path, live):
    ledger = _ledger(tmp_path, 1)
    assert ledger.grant(GIB, free=70 * GIB) == GIB
    assert ledger.grant(100 * GIB, free=70 * GIB) == TIMING_MEMORY_CAP
    assert ledger.grant(100 * GIB, free=8 * GIB) == int(TIMING_MEMORY_FRACTION * 8 * GIB)
    assert ledger.grant(100 * GIB, free=0, least=3 * GIB) == 3 * GIB  # what it cannot do without


@pytest.mark.parametrize("evaluations", [2, 9, 25])
def test_evaluations_that_joined_share_the_gpu(tmp_path, live, evaluations):
    ledgers = [_ledger(tmp_path, pid) for pid in range(1, evaluations + 1)]
    for ledger in ledgers:
        ledger.join()
    grants = [ledger.grant(100 * GIB, free=75 * GIB) for ledger in ledgers]
    share = GPU_MEMORY_SHARE * TOTAL
    assert sum(grants) <= share
    assert all(g == int(min(TIMING_MEMORY_CAP, share / evaluations)) for g in grants)


def test_a_claim_is_released_and_a_dead_process_forgotten(tmp_path, live):
    first, second = _ledger(tmp_path, 1), _ledger(tmp_path, 2)
    first.join()
    second.join()
    with first.claim(100 * GIB, free=75 * GIB) as held:
        assert held == TIMING_MEMORY_CAP
    assert first.sessions() == 2
    live.discard(2)  # killed without leaving
    assert first.sessions() == 1
    first.leave()
    assert first.sessions() == 0


def test_claims_of_others_bound_a_grant(tmp_path, live, monkeypatch):
    monkeypatch.setattr(budget, "TIMING_MEMORY_CAP", 64 * GIB)
    a, b = _ledger(tmp_path, 1), _ledger(tmp_path, 2)
    a.join()
    assert a.grant(100 * GIB, free=80 * GIB) == int(min(GPU_MEMORY_SHARE * TOTAL, TIMING_MEMORY_FRACTION * 80 * GIB))
    b.join()  # arrives while a holds its claim: it gets what is left of the share, never more
    held = a.grant(100 * GIB, free=80 * GIB)
    assert b.grant(100 * GIB, free=80 * GIB) <= GPU_MEMORY_SHARE * TOTAL - held


def _evaluation(folder, barrier, out):
    ledger = MemoryLedger(key="GPU-test", total=TOTAL, folder=folder)
    ledger.join()
    barrier.wait()  # every process joined before any asks
    out.put(ledger.grant(100 * GIB, free=75 * GIB))
    barrier.wait()  # every claim held at once


def test_processes_started_together_never_hold_more_than_the_share(tmp_path):
    ctx = multiprocessing.get_context("fork")
    count = 6
    barrier, out = ctx.Barrier(count), ctx.Queue()
    procs = [ctx.Process(target=_evaluation, args=(tmp_path, barrier, out)) for _ in range(count)]
    for p in procs:
        p.start()
    grants = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sum(grants) <= GPU_MEMORY_SHARE * TOTAL
    assert min(grants) >= int(min(TIMING_MEMORY_CAP, GPU_MEMORY_SHARE * TOTAL / count))
    assert MemoryLedger(key="GPU-test", total=TOTAL, folder=tmp_path).sessions() == 0  # all gone: all dropped
