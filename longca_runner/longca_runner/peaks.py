"""Peaks a row is divided by: the best matmul this run measured (several shapes, per dtype) and the
GPU model's datasheet figure (dense, no sparsity). One 8192³ matmul is not a peak: on one H200 it
read 669-678 TFLOP/s while 4096³ read 718-789, so kernels showed "106 % of peak"."""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# square matmul sizes tried; the best median wins (CPU sizes keep a CPU run short)
CUDA_SHAPES = (4096, 8192, 16384)
CPU_SHAPES = (256, 512, 1024)
# On a CPU without 16-bit matrix instructions a bfloat16 or float16 matmul is emulated (1.3 GFLOP/s
# against float32's 169 on a 2-core AVX2 machine, 2026-12-06), while attention there computes in
# float32 (the reference, torch's CPU kernels upcast): a 16-bit row's ceiling is the faster of the two
UPCAST_ON_CPU = ("bfloat16", "float16")


@dataclass(frozen=True)
class Datasheet:
    """One dense tensor-core figure of one GPU model, and where it comes from."""

    tflops: float
    source: str


_H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (v1.04), table of H100 SXM5 peak rates, dense column"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet: figures with sparsity, halved for dense"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): 1,979 BF16 / 3,958 FP8 TFLOPS with sparsity, halved"
_BLACKWELL_DS = ("NVIDIA HGX B200 / GB200 NVL72 datasheet, individual Blackwell GPU specifications: figures with "
                 "sparsity, halved for dense")
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 Tensor Core 312 TFLOPS (624 with sparsity)"
_L40S_DS = "NVIDIA L40S datasheet: BF16/FP16 Tensor Core 362.05 TFLOPS (733 with sparsity), FP8 733 (1,466)"
_ADA_WP = ("NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 column: BF16 Tensor 165.2 TFLOPS (FP32 "
           "accumulate), FP16 Tensor 330.3 and FP8 660.6 with FP16 accumulate, dense")
_RTX_BW_WP = ("NVIDIA RTX Blackwell GPU Architecture whitepaper, GeForce RTX 5090 column: FP16/BF16 Tensor 419 "
              "TFLOPS dense with FP16 accumulate (838 with sparsity), FP8 838 dense; the upper figure is kept, so "
              "of-datasheet may read low for FP32-accumulate kernels but the gate never fires wrongly")

# an FP8 problem's peak: torch._scaled_mm of two e4m3 operands, for e5m2 too (cuBLASLt takes no e5m2 x e5m2
# product; Hopper and Blackwell datasheets give one FP8 rate for both formats)
FP8_MATMUL = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e4m3fn"}

# model -> dtype -> dense TFLOP/s. Not the "with sparsity" figures datasheets print first.
DATASHEET: dict[str, dict[str, Datasheet]] = {
    "H100 SXM": {"bfloat16": Datasheet(989.4, _H100_WP), "float16": Datasheet(989.4, _H100_WP),
                 "float8": Datasheet(1978.9, _H100_WP)},
    "H100 PCIe": {"bfloat16": Datasheet(756.5, _H100_DS + " (1,513 BF16/FP16)"),
                  "float16": Datasheet(756.5, _H100_DS + " (1,513 BF16/FP16)"),
                  "float8": Datasheet(1513.0, _H100_DS + " (3,026 FP8)")},
    "H200 SXM": {"bfloat16": Datasheet(989.5, _H200_DS), "float16": Datasheet(989.5, _H200_DS),
                 "float8": Datasheet(1979.0, _H200_DS)},
    "B200": {"bfloat16": Datasheet(2250.0, _BLACKWELL_DS + " (HGX B200: 4.5 PFLOPS FP16/BF16, 9 FP8)"),
             "float16": Datasheet(2250.0, _BLACKWELL_DS + " (HGX B200: 4.5 PFLOPS FP16/BF16, 9 FP8)"),
             "float8": Datasheet(4500.0, _BLACKWELL_DS + " (HGX B200: 9 PFLOPS FP8)")},
    "GB200": {"bfloat16": Datasheet(2500.0, _BLACKWELL_DS + " (GB200: 5 PFLOPS FP16/BF16, 10 FP8)"),
              "float16": Datasheet(2500.0, _BLACKWELL_DS + " (GB200: 5 PFLOPS FP16/BF16, 10 FP8)"),
              "float8": Datasheet(5000.0, _BLACKWELL_DS + " (GB200: 10 PFLOPS FP8)")},
    "A100": {"bfloat16": Datasheet(312.0, _A100_DS), "float16": Datasheet(312.0, _A100_DS)},
    "L40S": {"bfloat16": Datasheet(362.05, _L40S_DS), "float16": Datasheet(362.05, _L40S_DS),
             "float8": Datasheet(733.0, _L40S_DS)},
    "RTX 4090": {"bfloat16": Datasheet(165.2, _ADA_WP), "float16": Datasheet(330.3, _ADA_WP),
                 "float8": Datasheet(660.6, _ADA_WP)},
    "RTX 5090": {"bfloat16": Datasheet(419.0, _RTX_BW_WP), "float16": Datasheet(419.0, _RTX_BW_WP),
                 "float8": Datasheet(838.0, _RTX_BW_WP)},
}

# torch.cuda.get_device_name -> model, first match wins (GB200 before B200, NVL and PCIe before SXM).
# NVL cards have lower clocks than SXM ones and no figure here: they map to a model without one.
_MODELS = (
    (r"GB200", "GB200"), (r"\bB200", "B200"),
    (r"H200.*NVL", "H200 NVL"), (r"H200", "H200 SXM"),
    (r"H100.*NVL", "H100 NVL"), (r"H100.*PCIe", "H100 PCIe"), (r"H100", "H100 SXM"),
    (r"A100", "A100"), (r"L40S", "L40S"), (r"RTX 4090", "RTX 4090"), (r"RTX 5090", "RTX 5090"),
)


def gpu_model(name: str | None) -> str | None:
    """The datasheet model of a device name ("NVIDIA H100 80GB HBM3" -> "H100 SXM"), None if unknown."""
    if not name:
        return None
    for pattern, model in _MODELS:
        if re.search(pattern, name, re.IGNORECASE):
            return model
    return None


def datasheet(gpu_name: str | None, dtype: str) -> Datasheet | None:
    """The dense datasheet figure for this GPU and dtype, None where the table has none (both FP8 formats
    read the one "FP8" figure datasheets print)."""
    model = gpu_model(gpu_name)
    return DATASHEET.get(model or "", {}).get("float8" if dtype.startswith("float8") else dtype)


def _dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
            "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}[name]


def _product(a: Any, b: Any) -> Callable[[], Any]:
    """The timed call of one matmul shape, bound to its own operands."""
    return lambda: a @ b


def _operands(n: int, name: str, dev) -> tuple[Any, Any]:
    """Two n x n operands of a dtype; FP8 ones as torch._scaled_mm takes them (the second column-major)."""
    import torch

    if name not in FP8_MATMUL:
        return torch.randn(n, n, device=dev, dtype=_dtype(name)), torch.randn(n, n, device=dev, dtype=_dtype(name))
    dtype = _dtype(FP8_MATMUL[name])
    return (torch.randn(n, n, device=dev).to(dtype), torch.randn(n, n, device=dev).to(dtype).t())


def _call(name: str, a: Any, b: Any) -> Callable[[], Any]:
    """The timed matmul: `a @ b`, or for FP8 `torch._scaled_mm` with unit scales and a bfloat16 output (what
    FP8 attention kernels accumulate into)."""
    if name not in FP8_MATMUL:
        return _product(a, b)
    import torch

    one = torch.ones((), dtype=torch.float32, device=a.device)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _fp8_refusal(name: str, dev) -> str | None:
    """Why this device cannot time an FP8 matmul (torch._scaled_mm raises), or None."""
    try:
        a, b = _operands(32, name, dev)
        _call(name, a, b)()
    except Exception as exc:  # noqa: BLE001 - whatever the device or build refuses: no FP8 peak here
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def measure(device: str, dtypes: Sequence[str] = ("bfloat16",), shapes: Sequence[int] | None = None,
            warm_seconds: float = 1.0, repeat: int = 50) -> dict[str, dict[str, Any]]:
    """Per dtype: {"tflops": best median TFLOP/s over the square shapes, "shape": [n, n, n]}; on a CPU a
    16-bit dtype's entry is float32's where that is faster (`UPCAST_ON_CPU`; "computed_as": "float32").

    The device first multiplies for `warm_seconds` (an idle GPU starts at low clocks); each shape
    is then timed `repeat` times with the harness's own timer (L2 flushed on CUDA)."""
    import torch

    from longca_runner.timing import summarize, synchronize, time_ms

    dev = torch.device(device)
    shapes = tuple(shapes or (CUDA_SHAPES if dev.type == "cuda" else CPU_SHAPES))
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(dtypes):
        if name in FP8_MATMUL and _fp8_refusal(name, dev):
            continue  # no FP8 matmul on this device or build: FP8 rows get no of-peak figure
        best: tuple[float, int] | None = None
        warm = _call(name, *_operands(shapes[0], name, dev))
        deadline = time.perf_counter() + warm_seconds
        while time.perf_counter() < deadline:
            warm()
            synchronize(dev)
        for n in shapes:
            median, _, _ = summarize(time_ms(_call(name, *_operands(n, name, dev)), dev, warmup=2, repeat=repeat))
            tflops = 2 * n ** 3 / (median * 1e-3) / 1e12
            if best is None or tflops > best[0]:
                best = (tflops, n)
        assert best is not None  # shapes is never empty
        out[name] = {"tflops": best[0], "shape": [best[1]] * 3}
    if dev.type == "cpu" and any(name in out for name in UPCAST_ON_CPU):
        wide = out.get("float32") or measure(device, ("float32",), shapes, warm_seconds, repeat)["float32"]
        for name in UPCAST_ON_CPU:
            if name in out and wide["tflops"] > out[name]["tflops"]:
                out[name] = {**wide, "computed_as": "float32"}
    return out


def shape_label(peak: dict[str, Any] | None) -> str | None:
    """"16384³" for a measured peak entry ("512³ in float32" for a CPU's 16-bit entry that is float32's)."""
    if not peak or not peak.get("shape"):
        return None
    dims = peak["shape"]
    label = f"{dims[0]}³" if len(set(dims)) == 1 else "x".join(map(str, dims))
    return f"{label} in {peak['computed_as']}" if peak.get("computed_as") else label


def gpu_name(device: str) -> str | None:
    """torch.cuda.get_device_name of a CUDA device, None for a CPU."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(torch.device(device))


def run_peaks(device: str, dtypes: Sequence[str]) -> dict[str, Any]:
    """What a run records about its peaks (runs.jsonl): every dtype's measured best with its shape,
    and `matmul_peak_tflops` (bf16 where measured, for readers of older records)."""
    import torch

    on_cuda = device.startswith("cuda") and torch.cuda.is_available()
    wanted = list(dict.fromkeys(["bfloat16", *dtypes] if on_cuda else dtypes))
    measured = measure(device, wanted, warm_seconds=1.0 if on_cuda else 0.1, repeat=50 if on_cuda else 5)
    first = measured.get("bfloat16") or next(iter(measured.values()), None)
    return {"matmul_peaks": measured, "matmul_peak_tflops": first["tflops"] if first else None}
