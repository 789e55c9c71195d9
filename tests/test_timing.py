"""longca.timing.time_interleaved: the functions take turns call by call, each timed on its own."""
from __future__ import annotations

import time

import torch
from longca.timing import time_interleaved


def test_interleaved_calls_alternate_and_time_each_function():
    order: list[str] = []

    def slow():
        order.append("slow")
        time.sleep(0.004)

    def fast():
        order.append("fast")

    times = time_interleaved({"slow": slow, "fast": fast}, torch.device("cpu"), warmup=1, repeat=3)
    assert order == ["slow", "fast"] * 4  # one warm-up round, then three timed rounds, turn by turn
    assert len(times["slow"]) == len(times["fast"]) == 3
    assert min(times["slow"]) >= 4.0 > max(times["fast"])
