#!/usr/bin/python3
"""Independent exact reference for the mHC post operator (SPEC §1, §2 policy `exact`), without torch.

Every term of every sum is a product of an fp32 or bf16 value with a bf16 value, exact in binary64 (at
most 24 + 8 significant bits). Python's math.fsum returns the correctly rounded binary64 sum of binary64
terms (Shewchuk's algorithm with a half-way correction), so RN64(exact) comes straight from it. The bf16
and fp32 values are rounded once from the exact value: RN64 is exact or lies on the same side of every
narrower rounding boundary as the exact value, so only an RN64 that lands exactly on a bf16/fp32 midpoint
needs the sign of the remainder (exact - RN64), which fsum also gives exactly.

  /usr/bin/python3 refs/exact_fsum.py DIR

reads the same DIR/manifest.txt and raw inputs as refs/torch_refs.py and writes DIR/NAME.exact.TENSOR
for out, grad_x, grad_residual (bf16 bits), grad_post, grad_comb (float32) and each *_f64 (float64).
"""
import math
import os
import sys

import numpy as np

from raw_inputs import configurations


def exact_sums(terms):
    """terms [N, K] float64 (exact products) -> (RN64 of each row's exact sum, sign of exact - RN64)."""
    rows = terms.tolist()
    rn = np.array([math.fsum(row) for row in rows], dtype=np.float64)
    return rn, rows


def round_once(rn, rows, precision, min_quantum_exp):
    """Correctly rounds the exact row sums to a binary format of `precision` significant bits whose
    smallest quantum is 2^min_quantum_exp (fp32: 24, -149; bf16: 8, -133), ties to even."""
    mag = np.abs(rn)
    _, e = np.frexp(mag)                                    # |v| in [2^(e-1), 2^e)
    q = np.maximum(e - precision, min_quantum_exp)          # exponent of the target format's ulp at v
    scaled = np.ldexp(mag, -q)                              # exact: a power-of-two scaling in range
    n = np.floor(scaled)
    frac = scaled - n                                       # exact
    up = frac > 0.5
    for i in np.flatnonzero(frac == 0.5):                   # RN64 on a midpoint: the remainder decides
        direction = _remainder_direction(rows[i], rn[i])
        up[i] = direction > 0 or (direction == 0 and n[i] % 2 == 1)
    out = np.copysign(np.ldexp(n + up, q), rn)
    return np.where((rn == 0) | ~np.isfinite(rn), rn, out)


def _remainder_direction(row, v):
    """+1 when the exact sum lies beyond v in magnitude, -1 when inside, 0 when v is exact."""
    rem = math.fsum(row + [-v])
    if rem == 0.0:
        return 0
    return 1 if (rem > 0) == (v > 0) else -1


def to_bf16_bits(values):
    f32 = values.astype(np.float32)  # exact: values are already bf16 values
    return (f32.view(np.uint32) >> 16).astype("<u2")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: exact_fsum.py DIR")
    root = sys.argv[1]
    for name, S, H, D, inputs in configurations(root):
        base = os.path.join(root, name)
        x, r, g, post, comb = (inputs[k].astype(np.float64) for k in ("x", "residual", "grad_out", "post", "comb"))
        # comb is [s, src, dst]

        # out[s,ho,d] = post[s,ho] x[s,d] + sum_k comb[s,k,ho] r[s,k,d]
        mix = comb[:, :, :, None] * r[:, :, None, :]                      # [S, k, ho, D]
        terms = np.concatenate([(post[:, :, None] * x[:, None, :])[..., None],
                                np.moveaxis(mix, 1, -1)], axis=-1)         # [S, ho, D, 1+H]
        tensors = {"out": (terms.reshape(-1, H + 1), "bf16")}
        # dx[s,d] = sum_ho post[s,ho] g[s,ho,d]
        tensors["grad_x"] = (np.moveaxis(post[:, :, None] * g, 1, -1).reshape(-1, H), "bf16")
        # dres[s,hi,d] = sum_ho comb[s,hi,ho] g[s,ho,d]
        tensors["grad_residual"] = (np.moveaxis(comb[:, :, :, None] * g[:, None, :, :], 2, -1).reshape(-1, H), "bf16")
        # dpost[s,ho] = sum_d g[s,ho,d] x[s,d];  dcomb[s,hi,ho] = sum_d g[s,ho,d] r[s,hi,d]
        tensors["grad_post"] = ((g * x[:, None, :]).reshape(-1, D), "fp32")
        tensors["grad_comb"] = ((g[:, None, :, :] * r[:, :, None, :]).reshape(-1, D), "fp32")
        for tensor, (t, fmt) in tensors.items():
            rn, rows = exact_sums(t)
            rn.astype("<f8").tofile(f"{base}.exact.{tensor}_f64")
            if fmt == "bf16":
                to_bf16_bits(round_once(rn, rows, 8, -133)).tofile(f"{base}.exact.{tensor}")
            else:
                round_once(rn, rows, 24, -149).astype("<f4").tofile(f"{base}.exact.{tensor}")


if __name__ == "__main__":
    main()
