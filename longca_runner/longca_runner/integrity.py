"""The plausibility gate: a row faster than its GPU's datasheet peak, or more than 5 % above the
best matmul its run measured (50 % on a CPU), is `suspect` and never "fastest". A template plugin
that cached its output recorded 81 TFLOP/s on a 2-core CPU: numbers like that must not reach a
table as facts. Sweeps, `longca run` and `longca dist-run` stamp their rows alike (`stamp`,
`Stamper`)."""
from __future__ import annotations

from typing import Any

from longca_runner import peaks

MEASURED_MARGIN = 1.05  # above the run's best matmul by more than this: suspect
# On a CPU sdpa's float32 attention reached 0.77-0.93 of the float32 matmul peak measured in the
# same process (2-core machine, 8 heads of 128, causal 4k and full 2k); the gap a loaded machine
# opens between a peak measured at a run's start and a row measured later (sdpa once read 2x a
# peak measured under load) is closed by `confirm`: a CPU row above the margin is judged again
# against a matmul measured right after it, and is suspect only if it is above that one too. So
# the margin can be tight, and a 2x cheat (half the heads) of a kernel near the peak is caught.
CPU_MEASURED_MARGIN = 1.5
SUSPECT_PREFIX = "suspect: "


def row_peak(run_extra: dict[str, Any], dtype: str) -> tuple[float | None, str | None]:
    """(the run's measured peak for this dtype, its shape label); bf16's for dtypes not measured."""
    measured = run_extra.get("matmul_peaks") or {}
    entry = measured.get(dtype)
    if entry:
        return entry.get("tflops"), peaks.shape_label(entry)
    if measured:  # a dtype the run did not measure: no best-of-shapes peak to gate against
        return None, None
    return run_extra.get("matmul_peak_tflops"), None


def implausible(row: Any, model: str | None = None) -> str | None:
    """Why an ok row's TFLOP/s cannot be true, or None. The measured gate needs a best-of-shapes
    peak (`matmul_peak_shape`): the single 8192³ matmul of older runs was not a ceiling."""
    tflops = row.get("tflops")
    if row.get("status") != "ok" or not tflops or row.get("simulated") or row.get("measured") is False:
        return None
    sheet = row.get("datasheet_peak_tflops")
    if sheet and tflops > sheet:
        return (f"{SUSPECT_PREFIX}{tflops:.1f} TFLOP/s is above the datasheet peak of {model or row.get('gpu')} "
                f"({sheet:g} TFLOP/s dense {row.get('dtype')}): the timing or the work done is wrong")
    peak, shape = row.get("matmul_peak_tflops"), row.get("matmul_peak_shape")
    margin = CPU_MEASURED_MARGIN if str(row.get("device") or "").startswith("cpu") else MEASURED_MARGIN
    if peak and shape and tflops > margin * peak:
        return (f"{SUSPECT_PREFIX}{tflops:.3g} TFLOP/s is {tflops / peak - 1:.0%} above this run's best "
                f"{row.get('dtype')} matmul ({peak:.3g} TFLOP/s at {shape}): more than "
                f"{margin - 1:.0%} above is not plausible for attention")
    return None


def datasheet_fields(gpu: str | None, dtype: str) -> dict[str, Any]:
    sheet = peaks.datasheet(gpu, dtype)
    return {"datasheet_peak_tflops": sheet.tflops if sheet else None}


def stamp(row: Any, run_extra: dict[str, Any], gpu: str | None) -> None:
    """Give a freshly measured row its run's peaks and GPU, then the gate's verdict (`confirm`ed on a CPU)."""
    row.matmul_peak_tflops, row.matmul_peak_shape = row_peak(run_extra, row.dtype)
    row.gpu = gpu
    row.datasheet_peak_tflops = datasheet_fields(gpu, row.dtype)["datasheet_peak_tflops"]
    confirm(row)
    gate(row)


def confirm(row: Any) -> None:
    """A CPU row the measured gate would flag gets a matmul peak measured now, under the load the row
    saw; its `matmul_peak_tflops` becomes the higher of the two (what it was judged against, which
    `longca report` judges it against again)."""
    if not str(row.get("device") or "").startswith("cpu") or implausible(row) is None:
        return
    now = peaks.measure(row.device, (row.dtype,), warm_seconds=0.1, repeat=5).get(row.dtype)  # as run_peaks on a CPU
    if now and now["tflops"] > (row.matmul_peak_tflops or 0):
        row.matmul_peak_tflops, row.matmul_peak_shape = now["tflops"], peaks.shape_label(now)


class Stamper:
    """`stamp` for rows measured outside a sweep (`longca run`, `longca dist-run`): this machine's matmul
    peak of each dtype measured once, at its first ok row (a refused case stays instant)."""

    def __init__(self, device: str):
        self.device = device
        self.extra: dict[str, Any] = {"matmul_peaks": {}}
        self.gpu = peaks.gpu_name(device)

    def __call__(self, row: Any) -> None:
        if row.status == "ok" and not row.get("simulated") and row.dtype not in self.extra["matmul_peaks"]:
            self.extra["matmul_peaks"].update(peaks.run_peaks(self.device, [row.dtype])["matmul_peaks"])
        stamp(row, self.extra, self.gpu)


def gate(row: Any) -> bool:
    """Mark an implausible ok row `suspect` (its reason says why); True if it was."""
    reason = implausible(row, peaks.gpu_model(row.get("gpu")))
    if reason is None:
        return False
    if isinstance(row, dict):
        row["status"], row["reason"] = "suspect", reason
    else:
        row.status, row.reason = "suspect", reason
    return True


def caveat_of(problem: Any, registry: Any = None) -> str | None:
    """The kernel's `caveat(problem)`: what its row must say beside its number, or None."""
    from longca.plugins import get_registry

    try:
        spec = (registry or get_registry()).kernel(problem.kernel)
        return spec.caveat(problem) if spec.caveat else None
    except Exception as exc:  # noqa: BLE001 - a raising caveat is itself worth saying
        return f"caveat() raised {type(exc).__name__}: {exc}"
