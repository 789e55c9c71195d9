"""The memory check gives torch's cached blocks back before it calls a case `oom`."""
import torch

from longca import memory
from longca.problem import Problem


def test_cached_memory_is_released_before_a_case_is_refused(monkeypatch):
    """On the H200 a 32K cuDNN deterministic backward left 127 GiB in torch's cache, and every later case of
    the sweep read 1.1 GiB free: the check now empties the cache and asks again."""
    released = []
    free = {"bytes": 1 << 30}
    monkeypatch.setattr(memory, "capacity", lambda device: (free["bytes"], "the GPU has"))

    def empty_cache():
        released.append(True)
        free["bytes"] = 100 << 30

    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    problem = Problem(kernel="sdpa", mask="causal", seqlen=1024, device="cuda")
    assert memory.too_big(problem, 2 << 30) is None and released == [True]
    free["bytes"], released[:] = 1 << 30, []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append(True))
    assert "needs 2.0 GiB" in memory.too_big(problem, 2 << 30) and released == [True]
