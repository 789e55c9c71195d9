"""The GPU's state around each case's timed calls: SM and memory clocks, power draw and limit,
temperature, throttle reasons, read through NVML (`pynvml`, from nvidia-ml-py, optional).

A kernel timed while the card throttles, or at a clock other than its neighbours', is not
comparable with them; nothing recorded that before. Without nvidia-ml-py (or NVML) every field is
`unknown`, with the reason."""
from __future__ import annotations

from typing import Any

# NVML clocks-event (throttle) reason bits, nvml.h; the benign ones do not slow a busy GPU down
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
BENIGN = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})
CLOCK_MOVE = 0.02  # the report warns when a run's SM or memory clock moved more than this


def _handle(nvml: Any, device: str) -> Any:
    """The NVML handle of a torch CUDA device, by UUID (CUDA_VISIBLE_DEVICES renumbers indices)."""
    import torch

    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    if uuid:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:  # noqa: BLE001 - MIG or an old driver: fall back to the index
            pass
    return nvml.nvmlDeviceGetHandleByIndex(index)


def _read(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a field NVML cannot read on this GPU stays unknown
        return None


def reasons(mask: int | None) -> list[str] | None:
    """Names of the bits set in an NVML clocks-event reason mask."""
    if mask is None:
        return None
    return [name for bit, name in REASONS.items() if mask & bit] + ([f"0x{mask:x}"] if mask >= 0x200 else [])


def snapshot(device: str) -> dict[str, Any] | None:
    """The GPU's state now; None for a CPU; {"unknown": why} where NVML cannot be read."""
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml as nvml
    except ImportError:
        return {"unknown": "nvidia-ml-py (pynvml) is not installed"}
    try:
        nvml.nvmlInit()
        handle = _handle(nvml, device)
    except Exception as exc:  # noqa: BLE001 - no NVML here: the state is unknown, the case still runs
        return {"unknown": f"NVML: {type(exc).__name__}: {exc}"}
    event_reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
        or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    power = _read(nvml.nvmlDeviceGetPowerUsage, handle)
    limit = _read(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return {
        "sm_clock_mhz": _read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "power_w": power / 1000 if power is not None else None,
        "power_limit_w": limit / 1000 if limit is not None else None,
        "temp_c": _read(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        "throttle": reasons(_read(event_reasons, handle)) if event_reasons else None,
    }


def energy_mj(device: str) -> float | None:
    """NVML's energy counter of the GPU (millijoules since the driver loaded; Volta and newer), or None
    where it cannot be read (a CPU, no nvidia-ml-py, no NVML, an older GPU)."""
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml as nvml

        nvml.nvmlInit()
        return float(nvml.nvmlDeviceGetTotalEnergyConsumption(_handle(nvml, device)))
    except Exception:  # noqa: BLE001 - no counter here: the row's energy stays None
        return None


class Recorder:
    """Hears a case's phases and reads the GPU when its timed calls start and when they end (the
    first `timing` phase of the case, and the phase after its last one), so the clocks recorded are
    those of a busy GPU, not of the idle gap between cases."""

    def __init__(self, device: str):
        self.device = device
        self.before: dict[str, Any] | None = None
        self.after: dict[str, Any] | None = None
        self._timing = False

    def on_phase(self, name: str) -> None:
        if name == "timing":
            if self.before is None:
                self.before = snapshot(self.device)
            self._timing = True
        elif self._timing:
            self.after, self._timing = snapshot(self.device), False

    def finish(self, row: Any) -> Any:
        """Put the two readings on the row (the second now if the case ended while timing)."""
        if self._timing:
            self.on_phase("end")
        row.gpu_state_before, row.gpu_state_after = self.before, self.after
        return row


def throttled(state: dict[str, Any] | None) -> list[str]:
    """The reasons in a reading that slow a busy GPU down (power, thermal, hardware slowdown)."""
    return [r for r in (state or {}).get("throttle") or [] if r not in BENIGN]


def busy(state: dict[str, Any] | None) -> bool:
    """A reading of a GPU at work (NVML did not call it idle)."""
    if not state or "unknown" in state:
        return False
    return "gpu_idle" not in (state.get("throttle") or [])


def summary(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's readings in brief: clock ranges of the busy readings, the hottest and hungriest
    reading, the throttle reasons seen, and the warnings a report must show."""
    unknown = sorted({str(s["unknown"]) for s in readings if "unknown" in s})
    working = [s for s in readings if busy(s)]

    def values(key: str) -> list[float]:
        return [float(s[key]) for s in working if isinstance(s.get(key), (int, float))]

    out: dict[str, Any] = {"readings": len(readings), "unknown": unknown}
    warnings = []
    for key, label in (("sm_clock_mhz", "SM clock"), ("mem_clock_mhz", "memory clock")):
        got = values(key)
        out[key] = (min(got), max(got)) if got else None
        if got and (max(got) - min(got)) / max(got) > CLOCK_MOVE:
            warnings.append(f"{label} moved {(max(got) - min(got)) / max(got):.1%} during the timed calls "
                            f"({min(got):.0f}-{max(got):.0f} MHz; over {CLOCK_MOVE:.0%})")
    out["temp_c_max"] = max(values("temp_c"), default=None)
    out["power_w_max"] = max(values("power_w"), default=None)
    out["power_limit_w"] = max(values("power_limit_w"), default=None)
    seen = sorted({r for s in readings for r in throttled(s)})
    out["throttle"] = seen
    if seen:
        count = sum(bool(throttled(s)) for s in readings)
        warnings.append(f"throttling in {count} of {len(readings)} readings: {', '.join(seen)}")
    out["warnings"] = warnings
    return out
