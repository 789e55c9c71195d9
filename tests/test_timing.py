"""longca_runner.timing.time_interleaved: the functions take turns call by call, in a rotating order,
each timed on its own."""
from __future__ import annotations

import time

import torch

from longca_runner.timing import time_interleaved


def test_interleaved_calls_alternate_and_time_each_function():
    order: list[str] = []

    def slow():
        order.append("slow")
        time.sleep(0.004)

    def fast():
        order.append("fast")

    times = time_interleaved({"slow": slow, "fast": fast}, torch.device("cpu"), warmup=1, repeat=3)
    # one warm-up round, then three timed turns whose order rotates (no fn always follows the same one)
    assert order == ["slow", "fast"] + ["slow", "fast", "fast", "slow", "slow", "fast"]
    assert len(times["slow"]) == len(times["fast"]) == 3
    assert min(times["slow"]) >= 4.0 > max(times["fast"])


def test_with_three_functions_each_takes_every_place_in_a_turn():
    order: list[str] = []
    fns = {name: (lambda name=name: order.append(name)) for name in "abc"}
    time_interleaved(fns, torch.device("cpu"), warmup=0, repeat=3)
    turns = [order[i:i + 3] for i in range(0, 9, 3)]
    assert turns == [list("abc"), list("bca"), list("cab")]
