#!/usr/bin/env python3
"""PyTorch peers of mhcdiff's CUDA kernels, on the GPU (SPEC §8 speed, SPEC §9 equality counts).

Two jobs, both in the same device session as `mhcdiff bench`:

  --dump DIR   DIR holds the raw inputs and outputs written by `mhcdiff bench --dump DIR` (meta.json,
               x.bin, residual.bin, post.bin, comb.bin, <policy>.out.bin ...). Counts, element by element,
               how many bf16 outputs differ between
                 fp32-seeded-fma and torch.compile of the seeded fp32 loop   (SPEC §9: expected 0)
                 fp32-seeded     and torch.compile of the seeded fp32 loop   (SPEC §9: about 1 in 26 000)
                 hf-bf16         and PyTorch's HF expression, eager on GPU   (SPEC §9: about 1 in 700 000)
  --bench CSV  the CSV of `mhcdiff bench --format csv`; times the torch.compile peer of each policy at the
               same shapes (median of --reps CUDA-event timings, like the bench) and prints one table with
               the speed ratio peer/mhcdiff (> 1: mhcdiff is faster).

Peers: hf-bf16 -> the HF expression (bf16 tensors, bmm); fp32-seeded, fp32-seeded-fma -> the seeded fp32
loop; fp32-mixfirst -> DeepSeek's reference (sum over streams, then + post*x); fp64 -> the seeded loop in
float64; exact has no PyTorch peer and is compared with the seeded fp32 loop, the fastest faithful peer.
Backward peers are autograd of the same compiled expression.
"""
import argparse
import csv
import json
import os
import statistics
import sys

import numpy as np
import torch
import torch._functorch.config

# The timed backward is replayed on one graph (retain_graph=True), which donated buffers forbid (a private flag:
# set only where this PyTorch has it).
if hasattr(torch._functorch.config, "donated_buffer"):
    torch._functorch.config.donated_buffer = False


def seeded_loop(x, r, post, comb, dtype=torch.float32):
    """TileKernels' order: acc = post*x, then acc += comb[k]*r[k] for k ascending; out bf16."""
    xf, rf = x.to(dtype), r.to(dtype)
    p, c = post.to(dtype), comb.to(dtype)
    acc = p.unsqueeze(-1) * xf.unsqueeze(1)
    for k in range(r.shape[1]):
        acc = acc + c[:, k, :].unsqueeze(-1) * rf[:, k, :].unsqueeze(1)
    return acc.to(torch.bfloat16)


def seeded_loop_product_first(x, r, post, comb):
    """The same loop written acc = c*r + acc: LLVM then fuses c*r (not post*x) into the first addition."""
    xf, rf = x.float(), r.float()
    acc = post.unsqueeze(-1) * xf.unsqueeze(1)
    for k in range(r.shape[1]):
        acc = comb[:, k, :].unsqueeze(-1) * rf[:, k, :].unsqueeze(1) + acc
    return acc.to(torch.bfloat16)


def seeded_loop_f64(x, r, post, comb):
    return seeded_loop(x, r, post, comb, torch.float64)


def hf_expression(x, r, post, comb):
    """HuggingFace eager: bf16 parameters, bf16 bmm (comb is [src, dst]: contract the first H axis)."""
    pb, cb = post.to(torch.bfloat16), comb.to(torch.bfloat16)
    return pb.unsqueeze(-1) * x.unsqueeze(1) + torch.matmul(cb.transpose(1, 2), r)


def mixfirst(x, r, post, comb):
    """DeepSeek's inference reference: torch.sum over the streams, then + post*x, in fp32."""
    m = torch.sum(comb.unsqueeze(-1) * r.float().unsqueeze(2), dim=1)
    return (post.unsqueeze(-1) * x.float().unsqueeze(1) + m).to(torch.bfloat16)


PEERS = {
    "hf-bf16": ("HF expression", hf_expression),
    "fp32-seeded": ("seeded fp32 loop", seeded_loop),
    "fp32-seeded-fma": ("seeded fp32 loop", seeded_loop),
    "fp32-mixfirst": ("sum over streams + post*x", mixfirst),
    "fp64": ("seeded fp64 loop", seeded_loop_f64),
    "exact": ("seeded fp32 loop", seeded_loop),
}


def bf16_from_file(path, shape):
    a = np.fromfile(path, dtype=np.int16).reshape(shape)
    return torch.from_numpy(a).view(torch.bfloat16)


def f32_from_file(path, shape):
    return torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(shape))


def count_diff(a, b):
    """Elements whose bits differ (NaN equal to NaN, SPEC §5)."""
    ab, bb = a.view(torch.int16), b.view(torch.int16)
    both_nan = torch.isnan(a.float()) & torch.isnan(b.float())
    return int(((ab != bb) & ~both_nan).sum().item())


def equality_counts(dump_dir):
    meta = json.load(open(os.path.join(dump_dir, "meta.json")))
    S, H, D = meta["S"], meta["H"], meta["D"]
    dev = "cuda"
    x = bf16_from_file(os.path.join(dump_dir, "x.bin"), (S, D)).to(dev)
    r = bf16_from_file(os.path.join(dump_dir, "residual.bin"), (S, H, D)).to(dev)
    post = f32_from_file(os.path.join(dump_dir, "post.bin"), (S, H)).to(dev)
    comb = f32_from_file(os.path.join(dump_dir, "comb.bin"), (S, H, H)).to(dev)
    n = S * H * D

    def ours(policy):
        return bf16_from_file(os.path.join(dump_dir, f"{policy}.out.bin"), (S, H, D)).to(dev)

    seeded_compiled = torch.compile(seeded_loop)(x, r, post, comb)
    seeded_pf_compiled = torch.compile(seeded_loop_product_first)(x, r, post, comb)
    hf_eager = hf_expression(x, r, post, comb)
    hf_compiled = torch.compile(hf_expression)(x, r, post, comb)
    rows = [
        ("fp32-seeded-fma", "torch.compile(seeded fp32 loop)", count_diff(ours("fp32-seeded-fma"), seeded_compiled), "0"),
        ("fp32-seeded", "torch.compile(seeded fp32 loop)", count_diff(ours("fp32-seeded"), seeded_compiled), "~1 in 26 000"),
        ("fp32-seeded-fma", "torch.compile(loop as acc = c*r + acc)", count_diff(ours("fp32-seeded-fma"), seeded_pf_compiled), "(form)"),
        ("fp32-seeded", "torch.compile(loop as acc = c*r + acc)", count_diff(ours("fp32-seeded"), seeded_pf_compiled), "(form)"),
        ("hf-bf16", "HF expression, eager (cuBLAS bmm)", count_diff(ours("hf-bf16"), hf_eager), "~1 in 700 000"),
        ("hf-bf16", "torch.compile(HF expression)", count_diff(ours("hf-bf16"), hf_compiled), "(not in SPEC)"),
    ]
    print(f"\nSPEC §9 equality counts at S={S}, H={H}, D={D} ({n} outputs), torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}:")
    print(f"{'policy':<16} {'peer':<40} {'differ':>10} {'1 in':>12}  SPEC")
    for policy, peer, diff, spec in rows:
        one_in = f"{n / diff:.0f}" if diff else "-"
        print(f"{policy:<16} {peer:<40} {diff:>10} {one_in:>12}  {spec}")
    return rows


def time_ms(fn, reps):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def random_inputs(S, H, D, grad):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(S, D, device="cuda", generator=g).to(torch.bfloat16)
    r = torch.randn(S, H, D, device="cuda", generator=g).to(torch.bfloat16)
    post = 2 * torch.rand(S, H, device="cuda", generator=g)
    comb = torch.rand(S, H, H, device="cuda", generator=g)
    go = torch.randn(S, H, D, device="cuda", generator=g).to(torch.bfloat16)
    if grad:
        for t in (x, r, post, comb):
            t.requires_grad_(True)
    return x, r, post, comb, go


def peer_timings(bench_csv, reps):
    rows = list(csv.DictReader(open(bench_csv)))
    shapes = sorted({(int(r["S"]), int(r["H"]), int(r["D"])) for r in rows}, key=lambda s: (s[1], s[0], s[2]))
    compiled = {name: torch.compile(fn) for name, (_, fn) in PEERS.items()}
    peer_ms = {}
    for S, H, D in shapes:
        x, r, post, comb, go = random_inputs(S, H, D, grad=True)
        for policy, fn in compiled.items():
            with torch.no_grad():
                fwd = time_ms(lambda: fn(x, r, post, comb), reps)
            out = fn(x, r, post, comb)
            bwd = time_ms(lambda: torch.autograd.grad(out, (x, r, post, comb), go, retain_graph=True), reps)
            peer_ms[(S, H, D, policy, "fwd")] = fwd
            peer_ms[(S, H, D, policy, "bwd")] = bwd
        del x, r, post, comb, go
        torch.cuda.empty_cache()
    print(f"\nmhcdiff (CUDA events, median) vs torch.compile peers (median of {reps}), same device session, "
          f"{torch.cuda.get_device_name()}:")
    print(f"{'S,H,D':<14} {'policy':<16} {'dir':<4} {'mhcdiff ms':>10} {'% copy':>7} {'peer':<27} {'peer ms':>9} {'peer/ours':>9}")
    slower = 0
    for row in rows:
        key = (int(row["S"]), int(row["H"]), int(row["D"]), row["policy"], row["dir"])
        if key not in peer_ms:
            continue
        ours, theirs = float(row["median_ms"]), peer_ms[key]
        ratio = theirs / ours if ours > 0 else float("inf")
        slower += ratio < 1
        print(f"{row['S']+','+row['H']+','+row['D']:<14} {row['policy']:<16} {row['dir']:<4} {ours:>10.4f} "
              f"{float(row['pct_of_copy']):>6.1f}% {PEERS[row['policy']][0]:<27} {theirs:>9.4f} {ratio:>8.2f}x")
    print(f"rows where the torch.compile peer was faster: {slower}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", help="directory written by `mhcdiff bench --dump`")
    ap.add_argument("--bench", help="CSV of `mhcdiff bench --format csv`")
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_peer.py: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 2
    if args.dump:
        equality_counts(args.dump)
    if args.bench:
        peer_timings(args.bench, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
