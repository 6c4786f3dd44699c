"""The raw input exchange shared by the reference scripts (tests/torch_refs_test.cpp writes it).

DIR/manifest.txt has lines `NAME S H D`; DIR/NAME.{x,residual,grad_out} hold bf16 bit patterns (<u2) and
DIR/NAME.{post,comb} float32 (<f4), row-major, comb as [S, src, dst]. Values come back as float32 numpy
arrays, which hold every bf16 value exactly. Nothing here imports mhcdiff.
"""
import os
import sys

import numpy as np


def _read(path, dtype, shape):
    v = np.fromfile(path, dtype=dtype)
    if v.size != int(np.prod(shape)):
        sys.exit(f"{path}: expected {int(np.prod(shape))} values, found {v.size}")
    return v.reshape(shape)


def read_bf16(path, shape):
    return (_read(path, "<u2", shape).astype(np.uint32) << 16).view(np.float32)


def read_f32(path, shape):
    return _read(path, "<f4", shape)


def configurations(root):
    """Yields (name, S, H, D, inputs) for every manifest line; inputs maps tensor name to a float32 array."""
    with open(os.path.join(root, "manifest.txt")) as manifest:
        configs = [line.split() for line in manifest if line.strip()]
    for name, S, H, D in configs:
        S, H, D = int(S), int(H), int(D)
        base = os.path.join(root, name)
        yield name, S, H, D, {
            "x": read_bf16(base + ".x", (S, D)),
            "residual": read_bf16(base + ".residual", (S, H, D)),
            "grad_out": read_bf16(base + ".grad_out", (S, H, D)),
            "post": read_f32(base + ".post", (S, H)),
            "comb": read_f32(base + ".comb", (S, H, H)),
        }
