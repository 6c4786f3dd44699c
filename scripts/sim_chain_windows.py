#!/usr/bin/env python3
"""How many steps of the exact backward's chains take the path without intervals, on an input file.

A host model (numpy) of the test the exact backward's chains make (backward_kernels.cu, H = 4, one warp per token;
numerics/exact_filter.hpp): a token's window is the smallest exact_chain_window of its five weight rows (post, then
comb[hi, ·] for each hi); lane l's step i covers chunk j = l + 32·i (8 positions) of the four gradient rows, whose
exact_chain_spread (largest magnitude's exponent minus the lowest bit the smallest non-zero one can have) must not
exceed the window; the warp takes the path only when all its lanes qualify (__all_sync). Both windows
are modelled: from the weights' lowest set bits (the kernel's) and from their exponents - 23 (session 25's).
Reads /inputs/post, /inputs/comb and /inputs/grad_out of a file `mhcdiff gen --grad` wrote (comb as [s, src, dst]).
  usage: scripts/sim_chain_windows.py FILE.h5     e.g. after mhcdiff gen --preset randn --shape 2048,4,4096 --seed 1 --grad
"""
import sys

import h5py
import numpy as np

LANES, CHUNK = 32, 8


def bf16_bits(dataset):
    """The bf16 bit patterns of a dataset written as mhcdiff's bf16 float type or as uint16."""
    raw = dataset[...]
    if raw.dtype == np.uint16:
        return raw.astype(np.uint32)
    return (np.asarray(raw, np.float32).view(np.uint32) >> 16).astype(np.uint32)


def windows(weights, lowest_set_bit):
    """exact_chain_window of each row of `weights` ([tokens, n] binary32)."""
    n = weights.shape[1]
    m = weights.astype(np.float32).view(np.uint32) & 0x7FFFFFFF
    field = (m >> 23).astype(np.int64)
    significand = np.where(field > 0, (m & 0x7FFFFF) | 0x800000, m).astype(np.int64)
    trailing = np.zeros_like(significand)
    if lowest_set_bit:
        low = significand & -significand  # the lowest set bit (0 for a zero weight)
        trailing = np.where(low > 0, np.log2(np.maximum(low, 1)).astype(np.int64), 0)
    bit = np.where(m != 0, np.maximum(field, 1) - 150 + trailing, 1 << 20).min(axis=1)
    largest = m.max(axis=1)
    c = int(np.ceil(np.log2(n))) if n > 1 else 0
    w = 51 - c - ((largest >> 23).astype(np.int64) - 127 - bit)
    w = np.where(largest == 0, 1 << 20, w)
    return np.where((largest >> 23) == 255, -(1 << 20), w)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with h5py.File(sys.argv[1], "r") as f:
        post = f["inputs/post"][...].astype(np.float32)
        comb = f["inputs/comb"][...].astype(np.float32)
        g = bf16_bits(f["inputs/grad_out"])
    S, H, D = g.shape
    if H != 4 or D % (LANES * CHUNK) != 0:
        sys.exit("the compact kernel's model: H = 4 and D a multiple of 256")
    steps = D // (LANES * CHUNK)
    mag = (g & 0x7FFF).reshape(S, H, D // CHUNK, CHUNK)  # [token, row, chunk, element]
    largest = mag.max(axis=(1, 3))
    smallest = np.where(mag == 0, 0xFFFF, mag).min(axis=(1, 3))
    smallest = np.where(smallest == 0xFFFF, 0x8000, smallest)  # min_pair_word's answer when every value is zero
    lsb = np.maximum(smallest >> 7, 1).astype(np.int64) - 127 - 7  # bf16_lsb_exponent
    spread = np.where(largest >> 7 >= 255, 1 << 20, (largest >> 7).astype(np.int64) - 127 - lsb)
    print(f"{sys.argv[1]}: S={S} H={H} D={D}, {steps} steps per lane")
    for name, lowest_set_bit in (("lowest set bits (kernel)", True), ("exponents - 23 (session 25)", False)):
        rows = [post] + [comb[:, hi, :] for hi in range(H)]
        window = np.min(np.stack([windows(r, lowest_set_bit) for r in rows]), axis=0)
        ok = spread <= window[:, None]  # [token, chunk]
        warp = ok.reshape(S, steps, LANES).all(axis=2)
        print(f"  window from {name}: median {int(np.median(window))}; qualifying lane steps {100 * ok.mean():.2f} %,"
              f" warp steps {100 * warp.mean():.2f} %, whole tokens {100 * warp.all(axis=1).mean():.2f} %")


if __name__ == "__main__":
    main()
