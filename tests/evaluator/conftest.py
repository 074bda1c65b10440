"""CPU stand-ins for the few CUDA calls the checks make, so the evaluator's logic runs without a GPU: the
runners here are Python functions computing on CPU tensors (honest, or wrong in one known way)."""
import pytest
import torch


class _Stream:
    cuda_stream = 0

    def synchronize(self):
        pass


@pytest.fixture
def cpu_cuda(monkeypatch):
    """torch.cuda's synchronization and delay calls as no-ops (the CPU computes in program order)."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: _Stream())
    return torch.device("cpu")
