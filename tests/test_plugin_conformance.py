"""The conformance suite itself: it passes an honest kernel and fails each kind of dishonest one.

Kernels here are built in-process around `longca.reference` and added to a fresh registry, so
each test shows one way of breaking the contract and the message the suite gives for it.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from longca import reference
from longca.plugins import PluginInfo, load_registry
from longca.specs import KernelSpec
from longca_testing import check_kernel, conformance_cases, run_conformance
from longca_testing.conformance import VARIANTS, Settings

MASKS = ("full", "causal_document")


def _prepare(problem, mask, q, k, v):
    return mask


def _run(mask, q, k, v):
    return reference.attention(q, k, v, mask)


HONEST = KernelSpec(name="honest", family="dense", description="the reference under another name", masks=MASKS,
                    prepare=_prepare, run=_run, dtypes=("float32", "bfloat16"), devices=("cpu",),
                    forward_lse=reference.forward_lse, backward_lse=reference.backward_lse)


@pytest.fixture(scope="module")
def base_registry():
    return load_registry()


def check(base_registry, spec: KernelSpec, *extra: KernelSpec, distribution: str = "longca-plugin-test",
          variants: tuple = ()):
    """The suite on CPU; without the shape-* cases unless `variants` (the other tests are about other cases)."""
    registry = load_registry() if extra else base_registry
    if not extra:  # the shared registry: replace any earlier test kernel of this name
        registry.entries["kernels"].pop(spec.name, None)
    for s in (spec,) + extra:
        registry._add("kernels", s, PluginInfo(s.name, distribution, "0", "tests"))
    return check_kernel(spec.name, "cpu", registry=registry, settings=Settings(variants=variants))


def test_honest_kernel_passes_every_case(base_registry):
    report = check(base_registry, HONEST, variants=VARIANTS)
    assert not report.failures, report.summary()
    assert {"registered", "spec", "available", "refusals-cpu", "mask-full-fwd-cpu",
            "mask-causal_document-bwd-cpu", "dtype-bfloat16-fwd-cpu", "forward_lse-cpu",
            "backward_lse-cpu"} <= set(report.passed)
    refused = {r["mask"] for r in report.rows if r["status"] == "unsupported"}
    assert refused >= {"causal", "sliding_window", "block_sparse_uniform"}  # every unclaimed mask refused


def test_run_conformance_is_the_whole_suite_in_one_call(base_registry):
    """The one-test form (`run_conformance`, the `longca_conformance` fixture): the rows of an honest
    kernel, an AssertionError naming the case of a wrong one."""
    registry = load_registry()
    for spec in (HONEST, replace(HONEST, name="wrongfull", run=lambda mask, q, k, v: _run(mask, q, k, v) * 2)):
        registry._add("kernels", spec, PluginInfo(spec.name, "longca-plugin-test", "0", "tests"))
    rows = run_conformance("honest", "cpu", registry=registry, settings=Settings(variants=()))
    assert rows and {r["kernel"] for r in rows} == {"honest"}
    with pytest.raises(AssertionError, match="mask-full-fwd-cpu"):
        run_conformance("wrongfull", "cpu", registry=registry, settings=Settings(variants=()))


def test_cases_cover_devices_and_directions():
    ids = [c.id for c in conformance_cases("sdpa", devices=("cpu", "cuda"))]
    assert "mask-causal-bwd-cuda" in ids and "dtype-bfloat16-fwd-cpu" in ids and "refusals-cuda" in ids
    assert [c.id for c in conformance_cases("no-such-kernel")] == ["registered"]


def test_wrong_output_on_one_mask_names_it(base_registry):
    def run(mask, q, k, v):
        out = reference.attention(q, k, v, mask)
        return out * 1.5 if mask.name == "causal_document" else out

    report = check(base_registry, replace(HONEST, name="wrongdoc", run=run), variants=VARIANTS)
    shapes = {f"shape-{v}-{d}-cpu" for v in ("s1152", "s997-b2-gqa3", "s515-mha") for d in ("fwd", "bwd")}
    # the timed-forward integrity case runs on the variant mask (causal_document) too, so it fails as well
    assert set(report.failures) == {"mask-causal_document-fwd-cpu", "mask-causal_document-bwd-cpu",
                                    "timing-integrity-cpu"} | shapes
    assert "mask causal_document fwd on cpu" in report.failures["mask-causal_document-fwd-cpu"]
    assert "incorrect: relative error" in report.failures["mask-causal_document-fwd-cpu"]


def test_claimed_dtype_that_fails_is_caught(base_registry):
    def run(mask, q, k, v):
        if q.dtype == torch.bfloat16:
            raise RuntimeError("no bf16 kernel compiled")
        return reference.attention(q, k, v, mask)

    report = check(base_registry, replace(HONEST, name="nobf16", run=run))
    assert set(report.failures) == {"dtype-bfloat16-fwd-cpu", "dtype-bfloat16-bwd-cpu"}
    assert "error: RuntimeError: no bf16 kernel compiled" in report.failures["dtype-bfloat16-fwd-cpu"]


@pytest.mark.parametrize("supports, message", [
    (lambda p: "", "supports() returned ''"),
    (lambda p: False, "supports() returned False"),
    (lambda p: 1 / 0, "supports() raised ZeroDivisionError"),
    (lambda p: "too short" if p.mask == "full" else None, "claims mask full but supports() refuses its forward"),
])
def test_supports_must_answer_none_or_a_reason(base_registry, supports, message):
    report = check(base_registry, replace(HONEST, name="badsupports", supports=supports))
    assert any(message in m for m in report.failures.values()), report.summary()


def test_refused_backward_is_a_skip_with_the_reason(base_registry):
    spec = replace(HONEST, name="nobwdhere", supports=lambda p: "no backward on CPU" if p.direction != "fwd" else None)
    report = check(base_registry, spec)
    assert not report.failures, report.summary()
    assert "refused by supports(): no backward on CPU" in report.skips["mask-full-bwd-cpu"]
    assert "refused by supports(): no backward on CPU" in report.skips["backward_lse-cpu"]
    assert {"mask-full-fwd-cpu", "forward_lse-cpu"} <= set(report.passed)


def test_malformed_spec(base_registry):
    spec = replace(HONEST, name="malformed", masks=("full", "no_such_mask"), description=" ", forward_lse=None)
    report = check(base_registry, spec)
    message = report.failures["spec"]
    assert "claims masks no plugin registered: ['no_such_mask']" in message
    assert "description is empty" in message and "backward_lse is declared without forward_lse" in message


def test_every_wildcard_claim_is_a_well_formed_spec():
    """any:static, any:block_sparse and any:all stand for registered masks: no spec problem."""
    from longca.specs import ANY_BLOCK_SPARSE, ANY_MASK, ANY_STATIC
    from longca_testing.conformance import check_spec

    registry = load_registry()
    for i, claim in enumerate((ANY_STATIC, ANY_BLOCK_SPARSE, ANY_MASK)):
        spec = replace(HONEST, name=f"wildcard{i}", masks=(claim,))
        registry._add("kernels", spec, PluginInfo(spec.name, "longca-plugin-test", "0", "tests"))
        assert check_spec(spec.name, registry) == [], claim


def test_unavailable_kernel_skips_runs_but_checks_its_spec(base_registry):
    report = check(base_registry, replace(HONEST, name="missinglib", available=lambda: "libfoo is not installed"))
    assert not report.failures, report.summary()
    assert "libfoo is not installed" in report.skips["available"]
    assert "libfoo is not installed" in report.skips["mask-full-fwd-cpu"]
    assert {"spec", "refusals-cpu"} <= set(report.passed)

    def broken_probe():
        raise ImportError("libfoo.so: cannot open shared object file")

    report = check(base_registry, replace(HONEST, name="crashprobe", available=broken_probe))
    assert "available() raised ImportError" in report.failures["available"]


def test_wrong_lse_primitives(base_registry):
    def log2_forward(q, k, v, slices, softmax_scale=None):
        out, lse = reference.forward_lse(q, k, v, slices, softmax_scale)
        return out, lse / math.log(2)

    def unscaled_forward(q, k, v, slices, softmax_scale=None):
        return reference.forward_lse(q, k, v, slices)  # ignores softmax_scale

    def double_dq(*args, **kwargs):
        dq, dk, dv = reference.backward_lse(*args, **kwargs)
        return dq * 2, dk, dv

    report = check(base_registry, replace(HONEST, name="log2lse", forward_lse=log2_forward))
    assert "lse differs from the reference" in report.failures["forward_lse-cpu"]
    report = check(base_registry, replace(HONEST, name="noscale", forward_lse=unscaled_forward))
    assert "scale 0.1: out relative error" in report.failures["forward_lse-cpu"]
    report = check(base_registry, replace(HONEST, name="baddq", backward_lse=double_dq))
    assert "dq relative error" in report.failures["backward_lse-cpu"]
    assert "dk relative error" not in report.failures["backward_lse-cpu"]


def test_name_conflict_fails_registered_naming_both(base_registry):
    registry = load_registry()
    registry._add("kernels", HONEST, PluginInfo("one", "longca-plugin-one", "0", "tests"))
    registry._add("kernels", HONEST, PluginInfo("two", "longca-plugin-two", "0", "tests"))
    report = check_kernel("honest", "cpu", registry=registry)
    assert list(report.failures) == ["registered"]
    assert "longca-plugin-one" in report.failures["registered"] and "longca-plugin-two" in report.failures["registered"]


def test_settings_change_the_problem_sizes(base_registry):
    from longca_testing.conformance import small_problem

    spec = replace(HONEST, head_dims=(128,), gqa=False)
    problem = small_problem(spec, "block_causal_document", "fwd", registry=base_registry,
                            settings=Settings(seqlen=512))
    assert problem.seqlen % 1024 == 0 and problem.head_dim == 128 and problem.heads_q == problem.heads_kv


def test_head_dim_follows_what_supports_accepts(base_registry):
    """A cut-down build (FA3 without head_dim 64) is tested at a head dim it has, and passes."""
    from longca_testing.conformance import small_problem

    spec = replace(HONEST, name="cutdown", head_dims=(64, 128),
                   supports=lambda p: "built without head_dim 64" if p.head_dim == 64 else None)
    assert small_problem(spec, "causal", "fwd", registry=base_registry).head_dim == 128
    assert small_problem(replace(spec, supports=None), "causal", "fwd", registry=base_registry).head_dim == 64
    assert small_problem(spec, "causal", "fwd", registry=base_registry, settings=Settings(head_dim=64)).head_dim == 64
    report = check(base_registry, spec)
    assert not report.failures, report.summary()


def test_block_follows_what_supports_accepts(base_registry):
    """A kernel of 128-token blocks (Block-Sparse-Attention) is tested on block 128, and passes."""
    from longca_testing.conformance import small_problem

    spec = replace(HONEST, name="blocks128", masks=("block_sparse_uniform",),
                   supports=lambda p: None if p.mask_params.get("block") == 128 else "blocks are 128x128")
    assert small_problem(spec, "block_sparse_uniform", "fwd", registry=base_registry).mask_params == {"block": 128}
    free = replace(spec, supports=None)
    assert small_problem(free, "block_sparse_uniform", "fwd", registry=base_registry).mask_params == {"block": 64}
    fixed = Settings(block=64)
    assert small_problem(spec, "block_sparse_uniform", "fwd", registry=base_registry,
                         settings=fixed).mask_params == {"block": 64}
    assert small_problem(spec, "causal", "fwd", registry=base_registry).mask_params == {}
    report = check(base_registry, spec)
    assert not report.failures, report.summary()


def test_check_kernel_takes_seqlen_as_conformance_tests_does(base_registry):
    base_registry.entries["kernels"].pop("honest_seqlen", None)
    spec = replace(HONEST, name="honest_seqlen", masks=("full",), dtypes=("float32",))
    base_registry._add("kernels", spec, PluginInfo(spec.name, "longca-plugin-test", "0", "tests"))
    report = check_kernel("honest_seqlen", "cpu", registry=base_registry,
                          settings=Settings(variants=()), seqlen=384)
    assert not report.failures, report.summary()
    assert {row["seqlen"] for row in report.rows if row["mask"] == "full" and row["status"] == "ok"} == {384}
