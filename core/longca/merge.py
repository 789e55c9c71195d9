"""Accumulating partial attention results: lse-corrected merging of outputs, summing of gradients.

Partial outputs over disjoint key sets combine exactly through their log-sum-exps:
lse = log(exp(lse_a) + exp(lse_b)), out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b.
Everything is merged in float32; rows that saw no key keep lse = -inf and a zero output.
"""
from __future__ import annotations

import math

import torch


def merge_(out_acc: torch.Tensor, lse_acc: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """In place: (out_acc (B, S, H, D) f32, lse_acc (B, H, S) f32) <- merged with (out, lse).

    `mul_` then `addcmul_`, which reads the call's output in its own dtype (no float copy): 18 bytes
    per output element by its tensor operations; the weights are (B, H, S) tensors, small next to
    the output. Measured on an H200 (docs/results/h200/cp-merge) it is 25 % faster than the
    float-copy merge it replaced; torch.compile of the same operations was slower still, so it is
    not compiled.
    """
    new = torch.logaddexp(lse_acc, lse)
    w_old = torch.exp(lse_acc - new).nan_to_num(0.0).transpose(1, 2).unsqueeze(-1)
    w_new = torch.exp(lse - new).nan_to_num(0.0).transpose(1, 2).unsqueeze(-1)
    out_acc.mul_(w_old).addcmul_(out, w_new)
    lse_acc.copy_(new)


def _overlaps(ranges: list[tuple[int, int]], a: int, b: int) -> bool:
    return any(x < b and a < y for x, y in ranges)


class OutputAccumulator:
    """Output and lse of a query buffer, built from calls over row ranges.

    A first call that covers every row is kept as it is (no float32 copy), so a strategy that
    needs one call costs nothing extra; otherwise rows are copied on first touch and merged after.
    """

    def __init__(self, q: torch.Tensor, head_dim_v: int | None = None):
        self.batch, self.seqlen, self.heads, _ = q.shape
        self.dim = head_dim_v or q.shape[-1]
        self.device = q.device
        self.out: torch.Tensor | None = None
        self.lse: torch.Tensor | None = None
        self.touched: list[tuple[int, int]] = []

    def _float_buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 (out, lse) buffers, made or converted on first need."""
        if self.out is None or self.lse is None:
            self.out = torch.zeros(self.batch, self.seqlen, self.heads, self.dim, dtype=torch.float32,
                                   device=self.device)
            self.lse = torch.full((self.batch, self.heads, self.seqlen), -math.inf, dtype=torch.float32,
                                  device=self.device)
        elif self.out.dtype != torch.float32:
            self.out = self.out.float()
        return self.out, self.lse

    def add(self, q0: int, q1: int, out: torch.Tensor, lse: torch.Tensor) -> None:
        if self.out is None and q0 == 0 and q1 == self.seqlen:
            self.out, self.lse = out, lse.float()
        else:
            acc_out, acc_lse = self._float_buffers()
            if _overlaps(self.touched, q0, q1):
                merge_(acc_out[:, q0:q1], acc_lse[:, :, q0:q1], out, lse)
            else:
                acc_out[:, q0:q1] = out
                acc_lse[:, :, q0:q1] = lse
        self.touched.append((q0, q1))

    def result(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(output in `dtype`, lse float32 (B, H, S))."""
        if self.out is None or self.lse is None:
            self._float_buffers()
        assert self.out is not None and self.lse is not None
        return self.out.to(dtype), self.lse


class GradAccumulator:
    """A float32 sum of gradient pieces over ranges of the sequence dimension (dim 1)."""

    def __init__(self, like: torch.Tensor):
        self.like = like
        self.value: torch.Tensor | None = None

    def add(self, a: int, b: int, grad: torch.Tensor) -> None:
        if self.value is None and a == 0 and b == self.like.shape[1]:
            self.value = grad
            return
        if self.value is None:
            self.value = torch.zeros(self.like.shape, dtype=torch.float32, device=self.like.device)
        elif self.value.dtype != torch.float32:
            self.value = self.value.float()
        self.value[:, a:b] += grad

    def add_full(self, grad: torch.Tensor) -> None:
        self.add(0, self.like.shape[1], grad)

    def result(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        if self.value is None:
            self.value = torch.zeros(self.like.shape, dtype=torch.float32, device=self.like.device)
        return self.value if dtype is None else self.value.to(dtype)
