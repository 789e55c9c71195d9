"""Peaks that mean something: the measured peak is the best of several shapes and says which;
datasheet figures are dense, per GPU model and dtype, each with its source; the report shows both."""
import json

import pytest
import torch

from longca_cli import analysis
from longca_cli.report import markdown
from longca_runner import peaks

from .test_report import RUN, row, write


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"), ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("Tesla T4", None), (None, None),
])
def test_device_names_map_to_models(name, model):
    assert peaks.gpu_model(name) == model


def test_datasheet_figures_are_dense_and_sourced():
    assert peaks.datasheet("NVIDIA H200", "bfloat16").tflops == 989.5
    assert peaks.datasheet("NVIDIA H100 80GB HBM3", "bfloat16").tflops == 989.4
    assert peaks.datasheet("NVIDIA H200 NVL", "bfloat16") is None  # lower clocks, no figure here: unknown
    assert peaks.datasheet("NVIDIA H200", "float32") is None
    for model in ("H100 SXM", "H100 PCIe", "H200 SXM", "B200", "GB200", "A100", "L40S", "RTX 4090", "RTX 5090"):
        figures = peaks.DATASHEET[model]
        assert "bfloat16" in figures, model
        for dtype, sheet in figures.items():
            assert sheet.source.strip() and sheet.tflops > 0, (model, dtype)
    # dense figures: fp8 is twice bf16 on every Hopper and Blackwell part (a sparse figure would break this)
    for model in ("H100 SXM", "H200 SXM", "B200", "GB200"):
        assert peaks.DATASHEET[model]["float8"].tflops == pytest.approx(2 * peaks.DATASHEET[model]["bfloat16"].tflops,
                                                                        rel=1e-3)


def test_measured_peak_is_the_best_shape(monkeypatch):
    speed = {64: 1.0, 128: 0.5, 256: 20.0}  # ms per call by shape: 128 wins, not the largest
    monkeypatch.setattr("longca_runner.timing.time_ms", lambda fn, dev, warmup, repeat: [speed[len(fn())]] * repeat)
    got = peaks.measure("cpu", ["float32"], shapes=(64, 128, 256), warm_seconds=0.0, repeat=3)
    assert got["float32"]["shape"] == [128, 128, 128]
    assert got["float32"]["tflops"] == pytest.approx(2 * 128 ** 3 / 0.5e-3 / 1e12)
    assert peaks.shape_label(got["float32"]) == "128³"


def test_measured_on_cpu_for_real():
    torch.manual_seed(0)
    got = peaks.run_peaks("cpu", ["float32"])
    entry = got["matmul_peaks"]["float32"]
    assert entry["shape"][0] in peaks.CPU_SHAPES and 0 < entry["tflops"] < 100
    assert got["matmul_peak_tflops"] == entry["tflops"]


def test_report_shows_measured_and_datasheet_columns(tmp_path):
    run = {**RUN, "matmul_peaks": {"bfloat16": {"tflops": 760.0, "shape": [4096] * 3}}, "matmul_peak_tflops": 760.0}
    rows = [row("fa3", tflops=600.0, matmul_peak_tflops=760.0, matmul_peak_shape="4096³"), row("sdpa", tflops=300.0)]
    write(tmp_path / "r", rows, run)
    text = markdown(analysis.load(tmp_path / "r"))
    assert "| fastest | of matmul peak | of datasheet |" in text
    assert "| fa3 | 79% | 61% |" in text  # 600 / 760 and 600 / 989.5
    assert "**of matmul peak**" in text and "bfloat16 760 at 4096³" in text
    assert "**of datasheet**" in text and "NVIDIA H200 bfloat16 989.5 TFLOP/s" in text
    csv = (tmp_path / "r" / "results.jsonl").read_text()
    assert json.loads(csv.splitlines()[0])["kernel"] == "fa3"


def test_a_cpu_16bit_ceiling_is_float32_where_that_is_faster(monkeypatch):
    """A CPU without 16-bit matrix instructions emulates bf16 (127x slower than float32 on a 2-core AVX2
    machine) while attention there computes in float32: the reference's bf16 rows were suspect."""
    ms = {"bfloat16": 100.0, "float16": 0.1, "float32": 1.0}  # bf16 emulated, fp16 fast
    monkeypatch.setattr("longca_runner.timing.time_ms",
                        lambda fn, dev, warmup, repeat: [ms[str(fn().dtype).split(".")[1]]] * repeat)
    got = peaks.measure("cpu", ["bfloat16", "float16"], shapes=(64,), warm_seconds=0.0, repeat=1)
    assert got["bfloat16"]["computed_as"] == "float32" and got["bfloat16"]["tflops"] == pytest.approx(
        2 * 64 ** 3 / 1e-3 / 1e12)
    assert "computed_as" not in got["float16"] and peaks.shape_label(got["bfloat16"]) == "64³ in float32"
    assert "float32" not in got  # only the dtypes asked for
