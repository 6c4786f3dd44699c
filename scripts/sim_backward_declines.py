#!/usr/bin/env python3
"""How often the exact backward's dot-product filter declines, on the bench's data, and how the declined ones end.

A host simulation (numpy) of the exact backward (backward_fast_kernel at H = 4, one warp per token) for
one dot product Σ_d g[d]·v[d] over D = 4096 (∂post or ∂comb: g a gradient row, v a stream row, both bf16 of
N(0,1) as mhcdiff bench fills them). Lane l owns chunks l, l + 32, ... of 8 elements and chains its products in
binary64 (each product is exact, so the fused multiply-add is one rounding, emulated exactly); its bound is
ExactDotFilter::lane_bound, RN32(max|g| · the RN32 chain of |v|); the 32 partials merge along the halving tree
(lane l += lane l + 16, then 8, 4, 2, 1) and ExactDotFilter::fp32 tests the result at depth 8·16 + 5. What it
declines goes to finish_dot_exact, whose first test (fp32_if_exact) settles the sums that are exact in binary64
(bound from the exact Σ|g·v| here, the kernel's binary32 chain being within 2^-10 of it); the rest take the
certified accumulators.
Prints the dot products per declined one, the share of tokens (20 dot products each at H = 4) with a declined one,
and how many of the declined ones the exactness test settles.
  usage: scripts/sim_backward_declines.py [dots] [seed]
"""
import sys

import numpy as np

D, LANES, CHUNK = 4096, 32, 8
STEPS = D // (LANES * CHUNK)
DEPTH = CHUNK * STEPS + 5


def bf16(a):
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


def lsb_exponent(rows):
    """bf16_lsb_exponent of each row's smallest non-zero magnitude."""
    bits = (rows.view(np.uint32) >> 16) & 0x7FFF
    smallest = np.where(bits == 0, 0x7FFF, bits).min(axis=1)
    return np.maximum(smallest >> 7, 1).astype(np.int64) - 127 - 7


def main():
    dots = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
    g = bf16(rng.standard_normal((dots, D)))
    v = bf16(rng.standard_normal((dots, D)))
    # [dot, step, lane, element]: element d = (lane + 32·step)·8 + e
    gl, vl = g.reshape(dots, STEPS, LANES, CHUNK), v.reshape(dots, STEPS, LANES, CHUNK)
    s = np.zeros((dots, LANES))
    value_sum = np.zeros((dots, LANES), np.float32)
    for i in range(STEPS):
        for e in range(CHUNK):
            s = s + gl[:, i, :, e].astype(np.float64) * vl[:, i, :, e].astype(np.float64)
            value_sum = (value_sum + np.abs(vl[:, i, :, e])).astype(np.float32)
    bound = (np.abs(gl).max(axis=(1, 3)) * value_sum).astype(np.float32)
    width = LANES // 2
    while width >= 1:
        s[:, :width] = s[:, :width] + s[:, width:2 * width]
        bound[:, :width] = (bound[:, :width] + bound[:, width:2 * width]).astype(np.float32)
        width //= 2
    a = np.abs(s[:, 0])
    error = DEPTH * bound[:, 0].astype(np.float64) * (1 + 2.0**-9) * 2.0**-53 + 2.0**-159
    midpoint = ((a.view(np.uint64) & ~np.uint64((1 << 29) - 1)) | np.uint64(1 << 28)).view(np.float64)
    accepted = (a >= 2.0**-100) & (a < 2.0**100) & (error < a * 2.0**-26) & (error < np.abs(a - midpoint))
    declined = ~accepted
    total = (np.abs(g.astype(np.float64)) * np.abs(v.astype(np.float64))).sum(axis=1) * (1 + 2.0**-9)
    exact = (s[:, 0] != 0) & (total <= np.ldexp(1.0, lsb_exponent(g) + lsb_exponent(v) + 53))
    n = int(declined.sum())
    per_token = 1 - (1 - n / dots) ** 20
    print(f"{dots} dot products of D = {D}: {n} declined (1 in {dots / max(n, 1):.0f}), "
          f"{100 * per_token:.1f} % of tokens (20 dot products) with one; "
          f"settled by the exactness test: {int((declined & exact).sum())} of {n}")


if __name__ == "__main__":
    main()
