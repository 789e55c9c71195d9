"""Triton kernels of the FlashMask attention: forward, backward preprocessing, dK/dV and dQ.

The backward runs split (a dK/dV kernel, then a dQ kernel) or fused (the dK/dV kernel with
FUSED_DQ, adding dQ with atomics); `configs.py` says which.

Every kernel walks, per row block (forward, dQ) or per column block (dK/dV), the tile lists
built in `plan.py` from the per-block min/max of the column bounds, in two phases unrolled at
compile time (`tl.static_range(2)`): phase 0 the *partial* tiles, where the per-element mask is
computed from the four bounds of each key column, phase 1 the *full* tiles, where nothing is
masked and the mask is skipped. Fully masked tiles are in neither list and cost nothing.
Scores are kept in base 2 (`exp2`), the softmax scale folded into one factor.

BOUNDS is int32 (4, Sk): rows LTS, LTE, UTS, UTE; key column c is masked for rows r with
UTS[c] <= r < UTE[c] or LTS[c] <= r < LTE[c]. CNT is int32 (outer blocks, 2) and IDX int32
(outer blocks, 2, inner blocks): the counts and indices of partial (0) and full (1) tiles.
Tail tiles (past Sq or Sk) are never full, so phase 1 needs no bounds checks.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fwd_kernel(Q, K, V, Out, LSE, BOUNDS, CNT, IDX, ORDER, scale_log2,
               stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
               stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
               SQ, SK, NKB,
               H, GROUP: tl.constexpr, D: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """One program: one block of BM query rows of one (batch, head); grid (B*H, row blocks)."""
    off_bh = tl.program_id(0)
    qb = tl.load(ORDER + tl.program_id(1))
    b = off_bh // H
    h = off_bh % H
    hk = h // GROUP
    offs_m = tl.arange(0, BM)
    rows = qb * BM + offs_m
    dims = tl.arange(0, D)
    # 64-bit scalar base offsets, 32-bit offsets inside a tile: no overflow at long sequences
    b64 = b.to(tl.int64)
    row0 = (qb * BM).to(tl.int64)
    q_ptrs = Q + (b64 * stride_qb + h * stride_qh + row0 * stride_qs) + (offs_m[:, None] * stride_qs + dims[None, :])
    if EVEN_M:  # noqa: SIM108 - triton kernel: the branch form its compiler takes
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=rows[:, None] < SQ, other=0.0)
    k_base = K + (b64 * stride_kb + hk * stride_kh)
    v_base = V + (b64 * stride_vb + hk * stride_vh)
    k_offs = tl.arange(0, BN)[:, None] * stride_ks + dims[None, :]
    v_offs = tl.arange(0, BN)[:, None] * stride_vs + dims[None, :]
    m_i = tl.full([BM], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    offs_n = tl.arange(0, BN)
    for phase in tl.static_range(2):
        n = tl.load(CNT + qb * 2 + phase)
        idx_base = IDX + (qb * 2 + phase) * NKB
        for j in range(n):
            col0 = tl.load(idx_base + j) * BN
            cols = col0 + offs_n
            k_ptrs = k_base + col0.to(tl.int64) * stride_ks + k_offs
            v_ptrs = v_base + col0.to(tl.int64) * stride_vs + v_offs
            if phase == 0 and not EVEN_N:  # noqa: SIM108 - triton kernel: the branch form its compiler takes
                k = tl.load(k_ptrs, mask=cols[:, None] < SK, other=0.0)
            else:
                k = tl.load(k_ptrs)
            qk = tl.dot(q, tl.trans(k))
            if phase == 0:
                in_k = cols < SK
                lts = tl.load(BOUNDS + cols, mask=in_k, other=0)
                lte = tl.load(BOUNDS + SK + cols, mask=in_k, other=0)
                uts = tl.load(BOUNDS + 2 * SK + cols, mask=in_k, other=0)
                ute = tl.load(BOUNDS + 3 * SK + cols, mask=in_k, other=0)
                r = rows[:, None]
                drop = ((r >= uts[None, :]) & (r < ute[None, :])) | ((r >= lts[None, :]) & (r < lte[None, :]))
                if not EVEN_N:
                    drop = drop | (cols[None, :] >= SK)
                qk = tl.where(drop, float("-inf"), qk)
                m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            else:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
                m_use = m_new
            p = tl.math.exp2(qk * scale_log2 - m_use[:, None])
            alpha = tl.math.exp2(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            if phase == 0 and not EVEN_N:  # noqa: SIM108 - triton kernel: the branch form its compiler takes
                v = tl.load(v_ptrs, mask=cols[:, None] < SK, other=0.0)
            else:
                v = tl.load(v_ptrs)
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new
    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    o_ptrs = Out + (b64 * stride_ob + h * stride_oh + row0 * stride_os) + (offs_m[:, None] * stride_os + dims[None, :])
    lse_ptrs = LSE + off_bh * SQ + rows
    if EVEN_M:
        tl.store(o_ptrs, out.to(Out.dtype.element_ty))
        tl.store(lse_ptrs, lse)
    else:
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=rows[:, None] < SQ)
        tl.store(lse_ptrs, lse, mask=rows < SQ)


@triton.jit
def bwd_preprocess_kernel(Out, DO, LSE, DELTA, LSE2,
                          stride_ob, stride_os, stride_oh, stride_dob, stride_dos, stride_doh,
                          SQ, H, D: tl.constexpr, BM: tl.constexpr):
    """delta = rowsum(O * dO) and the base-2 lse, +inf on rows that see nothing (so P = 0 there)."""
    off_bh = tl.program_id(0)
    b = off_bh // H
    h = off_bh % H
    offs_m = tl.arange(0, BM)
    rows = tl.program_id(1) * BM + offs_m
    dims = tl.arange(0, D)
    in_q = rows < SQ
    b64 = b.to(tl.int64)
    row0 = (tl.program_id(1) * BM).to(tl.int64)
    o = tl.load(Out + (b64 * stride_ob + h * stride_oh + row0 * stride_os)
                + (offs_m[:, None] * stride_os + dims[None, :]), mask=in_q[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + (b64 * stride_dob + h * stride_doh + row0 * stride_dos)
                 + (offs_m[:, None] * stride_dos + dims[None, :]), mask=in_q[:, None], other=0.0).to(tl.float32)
    lse = tl.load(LSE + off_bh * SQ + rows, mask=in_q, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    tl.store(DELTA + off_bh * SQ + rows, tl.sum(o * do, 1), mask=in_q)
    tl.store(LSE2 + off_bh * SQ + rows, lse2, mask=in_q)


@triton.jit
def bwd_dkdv_kernel(Q, K, V, DO, LSE2, DELTA, DK, DV, DQ, BOUNDS, CNT, IDX, ORDER, sm_scale, scale_log2,
                    stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                    stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                    stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                    stride_dqb, stride_dqs, stride_dqh,
                    SQ, SK, NQB,
                    H, GROUP: tl.constexpr, D: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                    HEAD_MINOR: tl.constexpr, FUSED_DQ: tl.constexpr, ROTATE: tl.constexpr, DQ_DESC=None):
    """One program: dK, dV of BN key columns of one (batch, KV head), summed over its GROUP query heads.

    With FUSED_DQ the program also adds each tile's share of dQ, dS @ K, into the float32 buffer
    DQ (zeroed by the caller) with atomics: one pass over the tiles instead of a second dQ kernel
    that recomputes P and dP. Key blocks of the same query rows add in any order, so dQ's float32
    sums are not bitwise reproducible run to run. Without it DQ and its strides are unused.
    ROTATE starts each key block's walk at a different place in its lists (query block kb mod n),
    so that programs running side by side add into different dQ rows. Given DQ_DESC, a tensor
    descriptor of DQ (B, SQ, H, D) with blocks (1, BM, 1, D), the tile is added by the TMA unit
    (one bulk reduction, Hopper and later) instead of per-thread atomics; rows past SQ are clipped.
    """
    off_bk = tl.program_id(0)
    kb = tl.load(ORDER + tl.program_id(1))
    hkv = H // GROUP
    b = off_bk // hkv
    hk = off_bk % hkv
    offs_n = tl.arange(0, BN)
    cols = kb * BN + offs_n
    dims = tl.arange(0, D)
    in_k = cols < SK
    b64 = b.to(tl.int64)
    col0 = (kb * BN).to(tl.int64)
    k_ptrs = K + (b64 * stride_kb + hk * stride_kh + col0 * stride_ks) + (offs_n[:, None] * stride_ks + dims[None, :])
    v_ptrs = V + (b64 * stride_vb + hk * stride_vh + col0 * stride_vs) + (offs_n[:, None] * stride_vs + dims[None, :])
    if EVEN_N:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    else:
        k = tl.load(k_ptrs, mask=in_k[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=in_k[:, None], other=0.0)
    lts = tl.load(BOUNDS + cols, mask=in_k, other=0)[:, None]
    lte = tl.load(BOUNDS + SK + cols, mask=in_k, other=0)[:, None]
    uts = tl.load(BOUNDS + 2 * SK + cols, mask=in_k, other=0)[:, None]
    ute = tl.load(BOUNDS + 3 * SK + cols, mask=in_k, other=0)[:, None]
    dk = tl.zeros([BN, D], dtype=tl.float32)
    dv = tl.zeros([BN, D], dtype=tl.float32)
    offs_m = tl.arange(0, BM)
    q_offs = offs_m[:, None] * stride_qs + dims[None, :]
    do_offs = offs_m[:, None] * stride_dos + dims[None, :]
    head0 = b * H + hk * GROUP
    for phase in tl.static_range(2):
        n = tl.load(CNT + kb * 2 + phase)
        idx_base = IDX + (kb * 2 + phase) * NQB
        # one flat loop over (query block, head) pairs, so the pipeline ramps up once per phase
        for t in range(n * GROUP):
            if HEAD_MINOR:  # the GROUP heads of one query block back to back
                j = t // GROUP
                g = t % GROUP
            else:  # one head's query blocks back to back
                j = t % n
                g = t // n
            if ROTATE:
                j = (j + kb) % n
            h = hk * GROUP + g
            row0 = tl.load(idx_base + j) * BM
            rows = row0 + offs_m
            q_ptrs = Q + (b64 * stride_qb + h * stride_qh + row0.to(tl.int64) * stride_qs) + q_offs
            do_ptrs = DO + (b64 * stride_dob + h * stride_doh + row0.to(tl.int64) * stride_dos) + do_offs
            lse_ptrs = LSE2 + (head0 + g) * SQ + rows
            delta_ptrs = DELTA + (head0 + g) * SQ + rows
            if phase == 0 and not EVEN_M:
                in_q = rows < SQ
                q = tl.load(q_ptrs, mask=in_q[:, None], other=0.0)
                lse = tl.load(lse_ptrs, mask=in_q, other=float("inf"))
            else:
                q = tl.load(q_ptrs)
                lse = tl.load(lse_ptrs)
            qkT = tl.dot(k, tl.trans(q))
            pT = tl.math.exp2(qkT * scale_log2 - lse[None, :])
            if phase == 0:
                r = rows[None, :]
                drop = ((r >= uts) & (r < ute)) | ((r >= lts) & (r < lte))
                pT = tl.where(drop, 0.0, pT)
            if phase == 0 and not EVEN_M:
                do = tl.load(do_ptrs, mask=in_q[:, None], other=0.0)
                delta = tl.load(delta_ptrs, mask=in_q, other=0.0)
            else:
                do = tl.load(do_ptrs)
                delta = tl.load(delta_ptrs)
            dv = tl.dot(pT.to(do.dtype), do, dv)
            dpT = tl.dot(v, tl.trans(do))
            dsT = (pT * (dpT - delta[None, :])).to(q.dtype)
            dk = tl.dot(dsT, q, dk)
            if FUSED_DQ:
                dq = tl.dot(tl.trans(dsT), k) * sm_scale
                dq_ptrs = (DQ + (b64 * stride_dqb + h * stride_dqh + row0.to(tl.int64) * stride_dqs)
                           + (offs_m[:, None] * stride_dqs + dims[None, :]))
                if DQ_DESC is not None:
                    DQ_DESC.atomic_add([b, row0, h, 0], tl.reshape(dq, [1, BM, 1, D]))
                elif phase == 0 and not EVEN_M:
                    tl.atomic_add(dq_ptrs, dq, mask=in_q[:, None], sem="relaxed")
                else:
                    tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    dk = dk * sm_scale
    dk_ptrs = (DK + (b64 * stride_dkb + hk * stride_dkh + col0 * stride_dks)
               + (offs_n[:, None] * stride_dks + dims[None, :]))
    dv_ptrs = (DV + (b64 * stride_dvb + hk * stride_dvh + col0 * stride_dvs)
               + (offs_n[:, None] * stride_dvs + dims[None, :]))
    if EVEN_N:
        tl.store(dk_ptrs, dk.to(DK.dtype.element_ty))
        tl.store(dv_ptrs, dv.to(DV.dtype.element_ty))
    else:
        tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=in_k[:, None])
        tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=in_k[:, None])


@triton.jit
def bwd_dq_kernel(Q, K, V, DO, LSE2, DELTA, DQ, BOUNDS, CNT, IDX, ORDER, sm_scale, scale_log2,
                  stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                  stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                  stride_dqb, stride_dqs, stride_dqh,
                  SQ, SK, NKB,
                  H, GROUP: tl.constexpr, D: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """One program: dQ of BM query rows of one (batch, head)."""
    off_bh = tl.program_id(0)
    qb = tl.load(ORDER + tl.program_id(1))
    b = off_bh // H
    h = off_bh % H
    hk = h // GROUP
    offs_m = tl.arange(0, BM)
    rows = qb * BM + offs_m
    dims = tl.arange(0, D)
    b64 = b.to(tl.int64)
    row0 = (qb * BM).to(tl.int64)
    q_ptrs = Q + (b64 * stride_qb + h * stride_qh + row0 * stride_qs) + (offs_m[:, None] * stride_qs + dims[None, :])
    do_ptrs = (DO + (b64 * stride_dob + h * stride_doh + row0 * stride_dos)
               + (offs_m[:, None] * stride_dos + dims[None, :]))
    if EVEN_M:  # noqa: SIM108 - triton kernel: the branch form its compiler takes
        q = tl.load(q_ptrs)
        do = tl.load(do_ptrs)
        lse = tl.load(LSE2 + off_bh * SQ + rows)
        delta = tl.load(DELTA + off_bh * SQ + rows)
    else:
        in_q = rows < SQ
        q = tl.load(q_ptrs, mask=in_q[:, None], other=0.0)
        do = tl.load(do_ptrs, mask=in_q[:, None], other=0.0)
        lse = tl.load(LSE2 + off_bh * SQ + rows, mask=in_q, other=float("inf"))
        delta = tl.load(DELTA + off_bh * SQ + rows, mask=in_q, other=0.0)
    k_base = K + (b64 * stride_kb + hk * stride_kh)
    v_base = V + (b64 * stride_vb + hk * stride_vh)
    dq = tl.zeros([BM, D], dtype=tl.float32)
    offs_n = tl.arange(0, BN)
    k_offs = offs_n[:, None] * stride_ks + dims[None, :]
    v_offs = offs_n[:, None] * stride_vs + dims[None, :]
    for phase in tl.static_range(2):
        n = tl.load(CNT + qb * 2 + phase)
        idx_base = IDX + (qb * 2 + phase) * NKB
        for j in range(n):
            col0 = tl.load(idx_base + j) * BN
            cols = col0 + offs_n
            k_ptrs = k_base + col0.to(tl.int64) * stride_ks + k_offs
            v_ptrs = v_base + col0.to(tl.int64) * stride_vs + v_offs
            if phase == 0 and not EVEN_N:  # noqa: SIM108 - triton kernel: the branch form its compiler takes
                k = tl.load(k_ptrs, mask=cols[:, None] < SK, other=0.0)
                v = tl.load(v_ptrs, mask=cols[:, None] < SK, other=0.0)
            else:
                k = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
            qk = tl.dot(q, tl.trans(k))
            p = tl.math.exp2(qk * scale_log2 - lse[:, None])
            if phase == 0:
                in_k = cols < SK
                lts = tl.load(BOUNDS + cols, mask=in_k, other=0)
                lte = tl.load(BOUNDS + SK + cols, mask=in_k, other=0)
                uts = tl.load(BOUNDS + 2 * SK + cols, mask=in_k, other=0)
                ute = tl.load(BOUNDS + 3 * SK + cols, mask=in_k, other=0)
                r = rows[:, None]
                drop = ((r >= uts[None, :]) & (r < ute[None, :])) | ((r >= lts[None, :]) & (r < lte[None, :]))
                if not EVEN_N:
                    drop = drop | (cols[None, :] >= SK)
                p = tl.where(drop, 0.0, p)
            dp = tl.dot(do, tl.trans(v))
            ds = p * (dp - delta[:, None])
            dq = tl.dot(ds.to(k.dtype), k, dq)
    dq = dq * sm_scale
    dq_ptrs = (DQ + (b64 * stride_dqb + h * stride_dqh + row0 * stride_dqs)
               + (offs_m[:, None] * stride_dqs + dims[None, :]))
    if EVEN_M:
        tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty))
    else:
        tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=rows[:, None] < SQ)
