"""Float comparison for tests whose verdict must not depend on the CPU's instruction set.

torch.allclose's tolerance is per element (atol + rtol·|want|), but the rounding error of an
element of a sum is of the size of the sum's largest terms, not of the element itself: an lse of
-0.001 computed from scores of size 4 carries an error of about eps·4, so an elementwise rtol
passes with one set of SIMD kernels (ATEN_CPU_CAPABILITY=avx2) and fails with another (avx512).
Here the error is measured against the largest magnitude of the expected tensor, and the
tolerance is a multiple of the dtype's eps that the computation justifies.
"""
from __future__ import annotations

import torch

FLOAT32_EPS = torch.finfo(torch.float32).eps  # 1.19e-7


def max_rel_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    """max|got - want| / max|want| over the finite entries of want; inf if non-finite entries differ."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    if got.shape != want.shape:
        raise AssertionError(f"shape {tuple(got.shape)} != expected {tuple(want.shape)}")
    finite = torch.isfinite(want)
    if not torch.equal(torch.isfinite(got), finite) or not torch.equal(got[~finite], want[~finite]):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = want[finite].abs().max().item() or 1.0
    return (got[finite] - want[finite]).abs().max().item() / scale


def assert_close(got: torch.Tensor, want: torch.Tensor, rtol: float, what: str = "") -> None:
    """Fail unless max|got - want| <= rtol·max|want|, with infinities (an empty row's -inf lse) in the same places."""
    err = max_rel_diff(got, want)
    assert err <= rtol, f"{what + ': ' if what else ''}max error {err:.3g} of the largest magnitude > {rtol:g}"
