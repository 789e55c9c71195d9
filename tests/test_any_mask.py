"""Kernels and strategies that claim `any:static` run masks that third-party plugins register."""
import json
import subprocess
import sys
from pathlib import Path

from longca.masks import slices as sl
from longca.masks.mask import Mask
from longca.plugins import PluginInfo, load_registry
from longca.problem import Problem
from longca.specs import MaskSpec
from longca_runner.measure import RunOptions, run_problem


def every_other_block(ctx):
    """A mask no built-in kernel lists by name: 64-token blocks, each sees itself and the block two back."""
    s, b = ctx.seqlen, 64
    slices = [(q, q + b, q, q + b, sl.CAUSAL) for q in range(0, s, b)]
    slices += [(q, q + b, q - 2 * b, q - b, sl.FULL) for q in range(2 * b, s, b)]
    return Mask("every_other_block", s, {}, sl.as_array(slices))


def registry_with_mask():
    registry = load_registry()
    registry._add("masks", MaskSpec("every_other_block", "heterogeneous", "test mask", every_other_block),
                  PluginInfo("test", "test-masks", "0", "tests"))
    return registry


def test_wildcard_kernels_run_a_third_party_mask():
    registry = registry_with_mask()
    for kernel in ("reference", "torch", "sdpa"):
        assert "every_other_block" in registry.claimed_masks(registry.kernel(kernel).masks)
        for direction in ("fwd", "bwd"):
            problem = Problem(kernel=kernel, mask="every_other_block", seqlen=512, heads_q=4, heads_kv=2,
                              head_dim=16, dtype="float32", direction=direction)
            row = run_problem(problem, RunOptions(warmup=0, repeat=1, check=True), registry)
            assert row["status"] == "ok" and row["rel_err"] < 1e-4, row
            assert row["area"] == 8 * 64 * 65 // 2 + 6 * 64 * 64


def test_kernels_listing_names_refuse_it_with_a_reason():
    from dataclasses import replace

    registry = registry_with_mask()
    named = replace(registry.kernel("reference"), name="names_only", masks=("causal",))
    registry._add("kernels", named, PluginInfo("test", "test-kernels", "0", "tests"))
    problem = Problem(kernel="names_only", mask="every_other_block", seqlen=512, heads_q=4, heads_kv=2,
                      head_dim=16, dtype="float32")
    row = run_problem(problem, RunOptions(warmup=0, repeat=1), registry)
    assert row["status"] == "unsupported" and "every_other_block is not supported" in row["reason"]


# ---- installed as a distribution: the registry is the only truth

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "static_mask_plugin"
DRIVER = """
import json
from longca.plugins import get_registry
from longca_runner.sweep import SweepSpec
print("RESULT " + json.dumps(SweepSpec(kernels=["reference"], seqlens=[512], masks="static").mask_names()))
"""


def test_installed_third_party_static_mask_is_static_claimed_and_checked(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_plugin_kit import env_with, longca_many, pip_install_target

    site = tmp_path / "site"
    pip_install_target([FIXTURE], site)
    proc = subprocess.run([sys.executable, "-c", DRIVER], env=env_with(site), capture_output=True, text=True,
                          timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    static = json.loads(lines[-1][len("RESULT "):])
    assert "sink_window" in static and "causal" in static
    (tmp_path / "spec.toml").write_text(
        '[sweep]\nkernels = KERNELS\nmasks = ["sink_window"]\nseqlens = [520]\nheads = ["4:2"]\n'
        'head_dims = [32]\ndtypes = ["float32"]\ndirections = ["fwd", "bwd"]\ndevice = "cpu"\ncheck = true\n'
        'warmup = 0\nrepeat = 1\nsamples = 1\n')
    listing, = longca_many(site, ["list-kernels", "-f", "json"])
    kernels = {row["name"]: row for row in json.loads(listing)}
    for name in ("fa2", "fa3", "fa4", "cudnn"):
        assert "sink_window" in kernels[name]["masks"], (name, kernels[name]["masks"])
    on_cpu = sorted(n for n, row in kernels.items() if row["available"] and "cpu" in row["devices"]
                    and "sink_window" in row["masks"])
    assert {"reference", "torch", "sdpa", "flex"} <= set(on_cpu), on_cpu
    spec = tmp_path / "spec.toml"
    spec.write_text(spec.read_text().replace("KERNELS", json.dumps(on_cpu)))
    longca_many(site, ["sweep", str(spec), "--output", str(tmp_path / "out")])
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {row["kernel"] for row in rows} == set(on_cpu)
    for row in rows:  # ok and checked, or refused for another reason (flashmask: bf16 only), never the mask
        refused = row["status"] == "unsupported" and row["reason"] and "mask sink_window" not in row["reason"]
        assert (row["status"] == "ok" and row["checked"] == "full" and row["rel_err"] < 1e-4) or refused, row
    ok = {(row["kernel"], row["direction"]) for row in rows if row["status"] == "ok"}
    assert {(k, d) for k in ("reference", "torch", "sdpa") for d in ("fwd", "bwd")} | {("flex", "fwd")} <= ok, ok


def test_a_run_builds_each_mask_draw_once():
    """supports_mask and prepare see the mask the run built: 3 samples, 3 builds, 3 plans."""
    from dataclasses import replace

    from longca_flashplan import kernel as flashplan_kernel
    from longca_flashplan.plan import any_window

    builds = []

    def counted(ctx):
        builds.append(ctx.seqlen)
        return replace(every_other_block(ctx), name="counted")

    registry = load_registry()
    registry._add("masks", MaskSpec("counted", "heterogeneous", "test mask", counted, uses_documents=True),
                  PluginInfo("test", "test-masks", "0", "tests"))
    planned = []
    real = flashplan_kernel.make_plan

    def plan_and_count(*args, **kwargs):
        planned.append(1)
        return real(*args, **kwargs)

    spec = replace(registry.kernel("reference"), name="planned", masks=("counted",),
                   supports_mask=lambda problem, mask: flashplan_kernel.plan_reason(problem, mask, any_window),
                   prepare=lambda problem, mask, q, k, v: (flashplan_kernel.cached_plan(mask, any_window), mask)[1])
    registry._add("kernels", spec, PluginInfo("test", "test-kernels", "0", "tests"))
    flashplan_kernel.make_plan = plan_and_count
    try:
        problem = Problem(kernel="planned", mask="counted", seqlen=256, heads_q=2, heads_kv=2, head_dim=16,
                          dtype="float32", sampler="uniform")
        row = run_problem(problem, RunOptions(warmup=0, repeat=1, samples=3, check=True), registry)
    finally:
        flashplan_kernel.make_plan = real
    assert row["status"] == "ok" and row["samples"] == 3, row
    assert len(builds) == 3 and len(planned) == 3
