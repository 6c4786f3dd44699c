#!/usr/bin/env python3
"""Dump mHC post-operator tensors from PyTorch into mhcdiff's HDF5 format (mhcdiff/1, docs/format.md).

    from mhcdiff_dump import dump
    dump("mine.h5", x=x, residual=residual, post=post, comb=comb, grad_out=g,
         results={"my-kernel": {"out": out, "grad_x": gx, "grad_residual": gr, "grad_post": gp, "grad_comb": gc}})

then `mhcdiff run mine.h5 -o ref.h5 --backward` and `mhcdiff compare mine.h5:/results/my-kernel ref.h5:/results/exact`.

Shapes (leading batch dims allowed): x [..., S, D], residual/grad_out/out [..., S, H, D], post [..., S, H],
comb [..., S, H, H] with comb[s, src, dst] (pass comb_layout="dst,src" if yours is transposed), grad_x [..., S, D],
grad_residual [..., S, H, D], grad_post [..., S, H], grad_comb [..., S, H, H].

bf16 tensors are stored bit-exactly as the HDF5 bf16 float type mhcdiff writes (h5dump and h5py's
ds.astype('f4') show their values) with attribute dtype="bfloat16". fp32 tensors are stored as float32. Nothing
is ever rounded here: a float32 tensor in a bf16 slot is stored as float32 and mhcdiff checks it is exactly bf16.
The file is written to a temp file and renamed, like mhcdiff's own writes.

Needs h5py, numpy and torch (Debian: python3-h5py python3-numpy python3-torch; use /usr/bin/python3).
"""
import argparse
import datetime
import os
import socket
import tempfile

import h5py
import numpy as np

FORMAT = "mhcdiff/1"
TOOL = "mhcdiff_dump.py 1"
_BF16_SLOTS = {"x", "residual", "grad_out", "out", "grad_x", "grad_residual"}


def bf16_h5type():
    """The HDF5 bf16 float type: sign bit 15, exponent bits 7..14 (bias 127), mantissa bits 0..6."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)  # fields first: HDF5 checks them against the size
    t.set_ebias(127)
    t.set_size(2)
    return t


def _to_numpy(t):
    try:
        import torch
    except ImportError:  # plain numpy arrays work too
        torch = None
    if torch is not None and isinstance(t, torch.Tensor):
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        if t.dtype in (torch.float32, torch.float64):
            return t.numpy(), str(t.numpy().dtype)
        raise TypeError(f"unsupported tensor dtype {t.dtype} (expected bfloat16, float32 or float64)")
    a = np.ascontiguousarray(t)
    if a.dtype == np.uint16:  # raw bf16 bits
        return a, "bfloat16"
    if a.dtype in (np.float32, np.float64):
        return a, str(a.dtype)
    raise TypeError(f"unsupported array dtype {a.dtype} (expected uint16 bf16 bits, float32 or float64)")


# Trailing dims after the token axis, per slot: x [..., S, D] has one, residual [..., S, H, D] two, and so on.
_ELEMENT_DIMS = {"x": 1, "grad_x": 1, "post": 1, "grad_post": 1, "residual": 2, "grad_out": 2, "out": 2,
                 "grad_residual": 2, "comb": 2, "grad_comb": 2}
_CHUNK_BYTES = 512 << 10  # mhcdiff's own chunk target (src/io/result_writer.cpp)


def _chunk_shape(shape, name, itemsize):
    """Chunks as mhcdiff writes them: whole token rows, about 512 KiB each; a row above 2 MiB is split, innermost
    dim first. None for an empty tensor (HDF5 cannot chunk a zero extent; it is stored without a checksum)."""
    if 0 in shape or not shape:
        return None
    elems = _ELEMENT_DIMS.get(name, 1)
    elems = min(elems, len(shape) - 1) if len(shape) > 1 else 0
    token_axis = len(shape) - elems - 1
    row_bytes = itemsize * int(np.prod(shape[token_axis + 1:], dtype=np.int64))
    chunk = [1] * len(shape)
    if row_bytes <= 2 << 20:
        chunk[token_axis] = max(1, min(_CHUNK_BYTES // max(1, row_bytes), shape[token_axis]))
        chunk[token_axis + 1:] = shape[token_axis + 1:]
    else:
        budget = max(1, _CHUNK_BYTES // itemsize)
        for axis in range(len(shape) - 1, token_axis, -1):
            chunk[axis] = max(1, min(budget, shape[axis]))
            budget = max(1, budget // chunk[axis])
    return tuple(chunk)


def _write(group, name, tensor):
    """One dataset, chunked with a Fletcher-32 checksum per chunk like mhcdiff's own files (docs/format.md): HDF5
    verifies it at every read, so a byte changed on disk is refused instead of read as another value."""
    data, kind = _to_numpy(tensor)
    chunk = _chunk_shape(data.shape, name, data.dtype.itemsize)
    if kind == "bfloat16":
        tid = bf16_h5type()
        space = h5py.h5s.create_simple(data.shape)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if chunk is not None:
            dcpl.set_chunk(chunk)
            dcpl.set_fletcher32()
        dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
        # Memory type = file type: HDF5 copies the 16-bit patterns without any conversion (bit-exact).
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)
        group[name].attrs["dtype"] = "bfloat16"
    elif chunk is not None:
        group.create_dataset(name, data=data, chunks=chunk, fletcher32=True)
    else:
        group.create_dataset(name, data=data)


def dump(path, x, residual, post, comb, grad_out=None, results=None, comb_layout="src,dst", models="",
         device=""):
    """Writes inputs (and optionally your kernel's outputs under /results/<name>) to `path` atomically."""
    if comb_layout not in ("src,dst", "dst,src"):
        raise ValueError("comb_layout must be 'src,dst' or 'dst,src'")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["comb_layout"] = comb_layout
            g = f.create_group("inputs")
            for name, t in (("x", x), ("residual", residual), ("post", post), ("comb", comb), ("grad_out", grad_out)):
                if t is not None:
                    _write(g, name, t)
            for policy, tensors in (results or {}).items():
                r = f.create_group(f"results/{policy}")
                for name, t in tensors.items():
                    _write(r, name, t)
                r.attrs.update({
                    "tool_version": TOOL, "policy": policy, "policy_description": "user kernel (dumped from PyTorch)",
                    "models": models, "device": device, "host": socket.gethostname(),
                    "utc_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "input_checksum": "",  # mhcdiff computes it when it reads the file (docs/format.md)
                })
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def hf_forward(x, residual, post, comb):
    """HuggingFace transformers' eager mHC post in bf16 (the hf-bf16 policy's peer), comb[s, src, dst]."""
    import torch
    pb, cb = post.to(torch.bfloat16), comb.to(torch.bfloat16)
    mix = torch.matmul(cb.transpose(-1, -2), residual)  # [S, H(dst), D]
    return pb.unsqueeze(-1) * x.unsqueeze(-2) + mix


def _example(path, shape, seed):
    import torch
    S, H, D = shape
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(S, D, generator=gen).to(torch.bfloat16)
    residual = torch.randn(S, H, D, generator=gen).to(torch.bfloat16)
    post = 2 * torch.rand(S, H, generator=gen)
    comb = torch.rand(S, H, H, generator=gen)
    grad_out = torch.randn(S, H, D, generator=gen).to(torch.bfloat16)
    post_p, comb_p = post.clone().requires_grad_(), comb.clone().requires_grad_()
    x_p, r_p = x.clone().requires_grad_(), residual.clone().requires_grad_()
    out = hf_forward(x_p, r_p, post_p, comb_p)
    out.backward(grad_out)
    dump(path, x, residual, post, comb, grad_out,
         results={"torch-hf": {"out": out, "grad_x": x_p.grad, "grad_residual": r_p.grad,
                               "grad_post": post_p.grad, "grad_comb": comb_p.grad}},
         models=f"PyTorch {torch.__version__} eager HF expression", device="cpu")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Write an example mhcdiff/1 file from PyTorch's HF mHC expression.")
    ap.add_argument("output")
    ap.add_argument("--shape", default="4,4,64", help="S,H,D")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    _example(a.output, tuple(int(v) for v in a.shape.split(",")), a.seed)
    print(f"wrote {a.output}")
