#!/usr/bin/env python3
"""How often the exact forward's binary32 first test declines, on the bench's data, for three bounds.

A host simulation (numpy) of forward_exact_kernel at H = 4: one warp per token and column block, 32 lanes of
8 elements each; weights comb ~ U[0,1) and post ~ U[0,2) on binary32's grid, x and residual bf16 of N(0,1),
as mhcdiff bench fills them. Each output is the chain comb[0][ho]·r[0] + ... + comb[3][ho]·r[3] + post[ho]·x
in binary32 fused multiply-adds (emulated: each product is exact in binary64; its sum with the previous partial
is rounded to binary64 and then to binary32, which differs from the FMA only by a rare double rounding: enough
for rates). Its interval [s - e, s + e] is declined when its ends round to different bf16 values, with e
  block: 2^-24·(1 + 2^-16)·Σ(n - i)|w_i| · the largest value magnitude of the lane's 40 values (the kernel's),
  pair:  the same with the largest magnitude of the pair's 10 values,
  tight: 2^-24·Σ_k |s_k| over the chain's partial sums (ExactBf16Filter32 with the whole chain as tail: the
         kernel's retest of what `block` declines, before the warp's round).
Directed roundings are emulated by one binary32 step outwards from the nearest, which only widens the interval.
Prints per bound: outputs per declined one, the share of warp-tokens with a declined pair (they stage), the
declined pairs per warp-token and the share of warp-tokens where some lane has two or more.
  usage: scripts/sim_forward_declines.py [tokens] [seed]
"""
import sys

import numpy as np


def bf16(a):
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


def interval_declines(s, e):
    """Whether [s - e, s + e] (binary32 s, its directed roundings emulated one step outwards) straddles a bf16
    rounding boundary: its ends round to different bf16 values."""
    hi = np.nextafter((s + e).astype(np.float32), np.float32(np.inf))
    lo = np.nextafter((s - e).astype(np.float32), np.float32(-np.inf))
    return bf16(hi).view(np.uint32) != bf16(lo).view(np.uint32)


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
    H, lanes, elems, u = 4, 32, 8, 2.0**-24
    n = H + 1
    comb = (rng.integers(0, 2**24, (tokens, H, H)) * 2.0**-24).astype(np.float32)  # comb[t, k, ho]
    post = (rng.integers(0, 2**24, (tokens, H)) * 2.0**-23).astype(np.float32)
    x = bf16(rng.standard_normal((tokens, lanes, elems)).astype(np.float32))
    r = bf16(rng.standard_normal((tokens, H, lanes, elems)).astype(np.float32))
    block_max = np.maximum(np.abs(x).max(2), np.abs(r).max(3).max(1))[:, :, None]
    pair_max = np.maximum(np.abs(x).reshape(tokens, lanes, 4, 2).max(3),
                          np.abs(r).reshape(tokens, H, lanes, 4, 2).max(4).max(1))
    pair_max = np.repeat(pair_max, 2, axis=2)
    declined = {name: np.zeros((tokens, H, lanes, elems), bool) for name in ("block", "pair", "tight")}
    for ho in range(H):
        weights = [comb[:, k, ho] for k in range(H)] + [post[:, ho]]
        values = [r[:, k] for k in range(H)] + [x]
        s = np.zeros((tokens, lanes, elems), np.float32)
        partial_sum = np.zeros((tokens, lanes, elems))
        for w, v in zip(weights, values):
            s = (w[:, None, None].astype(np.float64) * v + s.astype(np.float64)).astype(np.float32)
            partial_sum += np.abs(s.astype(np.float64))
        W = sum((n - i) * np.abs(w.astype(np.float64)) for i, w in enumerate(weights)) * (1 + 2**-16) * u
        declined["block"][:, ho] = interval_declines(s, W[:, None, None] * block_max)
        declined["pair"][:, ho] = interval_declines(s, W[:, None, None] * pair_max)
        declined["tight"][:, ho] = interval_declines(s, partial_sum * u * (1 + 2**-20))
    for name, d in declined.items():
        pairs = d.reshape(tokens, H, lanes, 4, 2).any(4)
        print(f"{name:5s}: 1 output in {1 / d.mean():5.0f} declined; warp-tokens staging {pairs.any(axis=(1, 2, 3)).mean():.3f}; "
              f"pairs per warp-token {pairs.sum(axis=(1, 2, 3)).mean():.2f}; "
              f"with a lane of two or more {(pairs.sum(axis=(1, 3)) > 1).any(1).mean():.3f}")


if __name__ == "__main__":
    main()
