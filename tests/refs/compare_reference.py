#!/usr/bin/python3
"""An independent computation of `mhcdiff compare`'s core metrics (SPEC §5), with h5py and numpy only.

Reads the raw bits of two datasets (bf16 through the file's own datatype, so no conversion happens; fp32 as
stored), then computes: elements, mismatched (bits differ, NaN vs NaN equal), +0/-0 mismatches, the ULP
histogram (monotone integer line; a NaN/inf mismatch counts as >256), max ULP and its first flat index,
max |C-R| and its first flat index over finite pairs, rel_l2 and normalized_max with math.fsum.

usage: compare_reference.py CAND.h5 /results/A/out REF.h5 /results/B/out REPORT.json TENSOR
Exit 0 when the JSON report's tensor TENSOR agrees, 1 (with the first difference) otherwise.
"""
import json
import math
import sys

import h5py
import numpy as np


def raw(path, dataset):
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        tid = ds.id.get_type()
        size = tid.get_size()
        if tid.get_class() == h5py.h5t.FLOAT and size == 2:  # bf16 stored as a 1-8-7 float type
            buf = np.empty(ds.shape, dtype=np.uint16)
            ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=tid)
            bits = buf.reshape(-1).astype(np.int64)
            values = (buf.reshape(-1).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            return bits, values, 16
        if tid.get_class() == h5py.h5t.INTEGER and size == 2:  # uint16 with dtype="bfloat16"
            buf = ds[...].astype(np.uint16).reshape(-1)
            return buf.astype(np.int64), (buf.astype(np.uint32) << 16).view(np.float32).astype(np.float64), 16
        arr = ds[...].astype(np.float32).reshape(-1)
        return arr.view(np.uint32).astype(np.int64), arr.astype(np.float64), 32


def ordinal(bits, width):
    sign = 1 << (width - 1)
    mag = bits & (sign - 1)
    return np.where(bits & sign, -mag, mag)


def main():
    cpath, cds, rpath, rds, report, tensor = sys.argv[1:7]
    cb, cv, width = raw(cpath, cds)
    rb, rv, _ = raw(rpath, rds)
    both_nan = np.isnan(cv) & np.isnan(rv)
    differ = (cb != rb) & ~both_nan
    nonfinite = differ & ~(np.isfinite(cv) & np.isfinite(rv))
    finite_mismatch = differ & ~nonfinite
    ulp = np.abs(ordinal(cb, width) - ordinal(rb, width))
    ulp = np.where(finite_mismatch, ulp, 0)
    edges = [(0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 256)]
    hist = []
    zero_bin = int(np.sum(~differ)) + int(np.sum(finite_mismatch & (ulp == 0)))
    hist.append(zero_bin)
    for lo, hi in edges[1:]:
        hist.append(int(np.sum(finite_mismatch & (ulp >= lo) & (ulp <= hi))))
    hist.append(int(np.sum(finite_mismatch & (ulp > 256))) + int(np.sum(nonfinite)))
    expect = {
        "elements": int(cb.size),
        "mismatched": int(np.sum(differ)),
        "signed_zero_mismatches": int(np.sum(finite_mismatch & (ulp == 0))),
        "nonfinite_mismatches": int(np.sum(nonfinite)),
        "ulp_histogram": hist,
    }
    if np.any(nonfinite):
        expect["max_ulp"] = "inf"
        expect["max_ulp_flat"] = int(np.argmax(nonfinite))
    elif np.any(differ):
        m = int(ulp.max())
        expect["max_ulp"] = m
        expect["max_ulp_flat"] = int(np.argmax(np.where(finite_mismatch, ulp, -1) == m))
    diff = np.where(finite_mismatch, np.abs(cv - rv), 0.0)
    finite_ref = np.isfinite(rv)
    ssd = math.fsum((diff * diff).tolist())
    ssr = math.fsum((np.where(finite_ref, rv, 0.0) ** 2).tolist())
    if np.any(nonfinite):
        rel_l2 = math.inf
    elif ssd == 0:
        rel_l2 = 0.0
    else:
        rel_l2 = math.sqrt(ssd) / math.sqrt(ssr) if ssr > 0 else math.inf
    max_abs = float(diff.max()) if diff.size else 0.0

    doc = json.load(open(report))
    t = next(x for x in doc["tensors"] if x["name"] == tensor)
    shape = t["shape"]
    trailing = {"out": 2, "grad_residual": 2, "grad_comb": 2, "grad_x": 1, "grad_post": 1}[tensor]

    def flat(index):
        dims = [int(np.prod(shape[: len(shape) - trailing]))] + shape[len(shape) - trailing:]
        f = 0
        for i, d in zip(index, dims):
            f = f * d + i
        return f

    problems = []
    for k in ("elements", "mismatched", "signed_zero_mismatches", "nonfinite_mismatches"):
        if t[k] != expect[k]:
            problems.append(f"{k}: report {t[k]} reference {expect[k]}")
    if t["ulp_histogram"]["counts"] != expect["ulp_histogram"]:
        problems.append(f"ulp_histogram: report {t['ulp_histogram']['counts']} reference {expect['ulp_histogram']}")
    if "max_ulp" in expect:
        if t["max_ulp"] != expect["max_ulp"]:
            problems.append(f"max_ulp: report {t['max_ulp']} reference {expect['max_ulp']}")
        if flat(t["max_ulp_index"]) != expect["max_ulp_flat"]:
            problems.append(f"max_ulp_index: report {t['max_ulp_index']} (flat {flat(t['max_ulp_index'])}) "
                            f"reference flat {expect['max_ulp_flat']}")
    if abs(t["max_abs"] - max_abs) > 0:
        problems.append(f"max_abs: report {t['max_abs']} reference {max_abs}")
    r = t["rel_l2"]
    if isinstance(r, str) or math.isinf(rel_l2):
        if str(r) != "inf" or not math.isinf(rel_l2):
            problems.append(f"rel_l2: report {r} reference {rel_l2}")
    elif abs(r - rel_l2) > 1e-12 * max(rel_l2, 1e-300):
        problems.append(f"rel_l2: report {r!r} reference {rel_l2!r}")
    if problems:
        print(f"{tensor}: " + "; ".join(problems))
        return 1
    print(f"{tensor}: agrees ({expect['mismatched']} of {expect['elements']} mismatched, hist {expect['ulp_histogram']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
