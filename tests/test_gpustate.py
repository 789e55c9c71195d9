"""The GPU's state on every row, read through a stand-in NVML on the CPU: clocks, power, temperature,
throttle reasons before and after the timed calls; `unknown` without nvidia-ml-py; the report warns
when a run's clocks moved over 2 % or it throttled."""
from __future__ import annotations

import sys
import types

import pytest

from longca_cli import analysis
from longca_cli.report import markdown
from longca_runner import gpustate

from .test_report import row, write


def fake_nvml(sm=(1980,), mem=2619, power=650_000, limit=700_000, temp=61, reasons=0x0):
    """A pynvml module answering from fixed values; `sm` is consumed one reading at a time."""
    clocks = list(sm)
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU = 1, 2, 0
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: "h"
    nvml.nvmlDeviceGetHandleByIndex = lambda i: "h"
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: (
        (clocks.pop(0) if len(clocks) > 1 else clocks[0]) if kind == 1 else mem)
    nvml.nvmlDeviceGetPowerUsage = lambda h: power
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: limit
    nvml.nvmlDeviceGetTemperature = lambda h, kind: temp
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: reasons
    return nvml


@pytest.fixture
def cuda_handle(monkeypatch):
    """torch's device lookups answered without a GPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(uuid="abc"))


def test_snapshot_reads_every_field(monkeypatch, cuda_handle):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(reasons=0x4 | 0x20))
    state = gpustate.snapshot("cuda:0")
    assert state == {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "power_w": 650.0, "power_limit_w": 700.0,
                     "temp_c": 61, "throttle": ["sw_power_cap", "sw_thermal_slowdown"]}
    assert gpustate.throttled(state) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert gpustate.snapshot("cpu") is None


def test_unknown_without_nvidia_ml_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert gpustate.snapshot("cuda") == {"unknown": "nvidia-ml-py (pynvml) is not installed"}


def test_recorder_reads_when_timing_starts_and_ends(monkeypatch, cuda_handle):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(sm=(1980, 1755)))
    recorder = gpustate.Recorder("cuda")
    for phase in ("inputs", "prepare", "first call", "peak memory"):
        recorder.on_phase(phase)
    assert recorder.before is None  # nothing read while the GPU may be idle
    recorder.on_phase("timing")
    recorder.on_phase("check")
    r = recorder.finish(types.SimpleNamespace())
    assert r.gpu_state_before["sm_clock_mhz"] == 1980 and r.gpu_state_after["sm_clock_mhz"] == 1755


def _state(sm, reasons=()):
    return {"sm_clock_mhz": sm, "mem_clock_mhz": 2619, "power_w": 600.0, "power_limit_w": 700.0, "temp_c": 60,
            "throttle": list(reasons)}


def test_report_warns_on_moved_clocks_and_throttling(tmp_path):
    steady = [row("fa3", gpu_state_before=_state(1980), gpu_state_after=_state(1975)),
              row("sdpa", gpu_state_before=_state(1980, ["gpu_idle"]), gpu_state_after=_state(1980))]
    write(tmp_path / "steady", steady)
    text = markdown(analysis.load(tmp_path / "steady"))
    assert "## GPU state" in text and "| steady | 4 | 1975-1980 | 2619 | 60 C | 600 W | 700 W | none |" in text
    assert "**Warning**" not in text
    moving = [row("fa3", gpu_state_before=_state(1980), gpu_state_after=_state(1700, ["sw_power_cap"]))]
    write(tmp_path / "moving", moving)
    text = markdown(analysis.load(tmp_path / "moving"))
    assert "**Warning** (moving): SM clock moved 14.1% during the timed calls (1700-1980 MHz; over 2%)" in text
    assert "**Warning** (moving): throttling in 1 of 2 readings: sw_power_cap" in text


def test_unknown_state_and_old_rows_render(tmp_path):
    write(tmp_path / "nonvml", [row("fa3", gpu_state_before={"unknown": "nvidia-ml-py (pynvml) is not installed"})])
    text = markdown(analysis.load(tmp_path / "nonvml"))
    assert "GPU state of nonvml: unknown (nvidia-ml-py (pynvml) is not installed)" in text
    write(tmp_path / "old", [row("fa3")])  # rows before the field: no section, no error
    assert "## GPU state" not in markdown(analysis.load(tmp_path / "old"))
