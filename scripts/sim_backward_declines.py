#!/usr/bin/env python3
"""How often the stream32 experiment's binary32 tests decline, on the bench's data (docs/performance.md).

A host simulation (numpy) of backward_fast_kernel<exact, 4, 1, ..., kCompact, kStream32> at H = 4, D = 4096: one
warp per token, lane l owning chunks l, l + 32, ... (16 steps of 8 elements), five stream rows per step (∂x with
the weights post[ho], ∂residual[hi] with comb[hi][ho]); weights post ~ U[0,2) and comb ~ U[0,1) on binary32's
grid, grad_out bf16 of N(0,1), as mhcdiff bench fills them. Each sum is the chain w[0]·g[0] + ... + w[3]·g[3] in
binary32 fused multiply-adds (emulated as in scripts/sim_forward_declines.py), declined when the ends of
[s - e, s + e] round to different bf16 values, with e
  first: 2^-24·(1 + 2^-16)·Σ(n - i)|w_i| · the largest |g| of the lane's step (its 32 gradient values),
  tight: 2^-24·Σ_k |s_k| over the chain's partial sums (the owner lane's retest of what `first` declines).
Prints sums per declined one for both bounds, the share of lane-steps and warp-steps with a declined pair, and
for what the retest leaves: pairs per warp-token (the token-end round finishes 16 at a time) and the share of
lane-tokens with more than the lane's two slots (those pairs are finished by the owner lane itself); for
stream32-deferred, which keeps the first test's pairs until the token's end, the same over four slots.
  usage: scripts/sim_backward_declines.py [tokens] [seed]
"""
import sys

import numpy as np

from sim_forward_declines import bf16, interval_declines


def main():
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
    H, lanes, steps, elems, u, slots = 4, 32, 16, 8, 2.0**-24, 2
    comb = (rng.integers(0, 2**24, (tokens, H, H)) * 2.0**-24).astype(np.float32)  # comb[t, hi, ho]
    post = (rng.integers(0, 2**24, (tokens, H)) * 2.0**-23).astype(np.float32)
    g = bf16(rng.standard_normal((tokens, H, steps, lanes, elems)).astype(np.float32))
    step_max = np.abs(g).max(axis=(1, 4))[:, :, :, None]  # per token, step, lane
    first = np.zeros((tokens, H + 1, steps, lanes, elems), bool)
    tight = np.zeros_like(first)
    for row in range(H + 1):
        weights = [post[:, ho] if row == 0 else comb[:, row - 1, ho] for ho in range(H)]
        s = np.zeros((tokens, steps, lanes, elems), np.float32)
        partial_sum = np.zeros(s.shape)
        for ho, w in enumerate(weights):
            s = (w[:, None, None, None].astype(np.float64) * g[:, ho] + s.astype(np.float64)).astype(np.float32)
            partial_sum += np.abs(s.astype(np.float64))
        W = sum((H - i) * np.abs(w.astype(np.float64)) for i, w in enumerate(weights)) * (1 + 2**-16) * u
        first[:, row] = interval_declines(s, W[:, None, None, None] * step_max)
        tight[:, row] = first[:, row] & interval_declines(s, partial_sum * u * (1 + 2**-20))
    first_pairs = first.reshape(tokens, H + 1, steps, lanes, 4, 2).any(5)
    left = tight.reshape(tokens, H + 1, steps, lanes, 4, 2).any(5)
    print(f"first test: 1 sum in {1 / first.mean():.0f} declined; lane-steps with a declined pair "
          f"{first_pairs.any(axis=(1, 4)).mean():.4f}; warp-steps {first_pairs.any(axis=(1, 3, 4)).mean():.3f}")
    first_per_lane_token = first_pairs.sum(axis=(1, 2, 4))  # stream32-deferred: what each lane keeps
    print(f"  deferred retest: pairs per lane-token {first_per_lane_token.mean():.2f}; lane-tokens over 4 slots "
          f"{(first_per_lane_token > 4).mean():.4f}")
    per_lane_token = left.sum(axis=(1, 2, 4))  # pairs each lane keeps for the token's end
    print(f"after the retest: 1 sum in {1 / max(tight.mean(), 1e-12):.0f} declined; pairs per warp-token "
          f"{per_lane_token.sum(1).mean():.2f}; warp-tokens with a round {(per_lane_token.sum(1) > 0).mean():.3f}; "
          f"lane-tokens over the {slots} slots {(per_lane_token > slots).mean():.5f}")


if __name__ == "__main__":
    main()
