#!/usr/bin/python3
"""Independent PyTorch references for the mHC post operator (SPEC §1, §2; issue #2).

Evaluates, with PyTorch's own CPU arithmetic and autograd, the three expressions mhcdiff's policies model:

  hf        the HuggingFace eager expression on bf16 tensors             -> policy hf-bf16
  deepseek  DeepSeek's fp32 reference (torch.sum over streams, + post*x) -> policy fp32-mixfirst
  seeded    the seeded fp32 loop (TileKernels / LMDeploy source order)   -> policy fp32-seeded
  fp64      the seeded loop in float64, autograd in float64 (the *_f64)  -> policy fp64

It imports nothing from mhcdiff: it is the independent side of tests/torch_refs_test.cpp. Usage:

  /usr/bin/python3 refs/torch_refs.py DIR

DIR/manifest.txt lists one configuration per line, "NAME S H D". For each NAME the inputs are raw
little-endian files DIR/NAME.{x,residual,grad_out} (bf16 bit patterns, uint16) and DIR/NAME.{post,comb}
(float32); comb is comb[s, src, dst]. Outputs are written as DIR/NAME.REF.TENSOR in the tensor's own
dtype (bf16 bits for out/grad_x/grad_residual, float32 for grad_post/grad_comb, float64 for *_f64), and
DIR/NAME.probe holds what the bf16 batched matmul of this shape does on this machine (see probe_bmm).
DIR/torch_env.txt records the PyTorch build and CPU the numbers came from.
"""
import os
import platform
import sys

import numpy as np
import torch

from raw_inputs import configurations

BF16 = torch.bfloat16


# ---- raw output: tensors written as their bit patterns (inputs: raw_inputs.py) ---------------------

def write_tensor(path, t):
    t = t.detach()
    if t.dtype == BF16:
        bits = (t.float().numpy().view(np.uint32) >> 16).astype("<u2")  # exact: a bf16 widened to fp32
        bits.tofile(path)
    elif t.dtype == torch.float32:
        t.numpy().astype("<f4").tofile(path)
    elif t.dtype == torch.float64:
        t.numpy().astype("<f8").tofile(path)
    else:
        raise TypeError(f"unexpected dtype {t.dtype}")


# ---- the expressions ----------------------------------------------------------------------------

def leaves(x, residual, post, comb):
    """Fresh autograd leaves: x, residual bf16 (activations), post, comb fp32 (the mHC coefficients)."""
    return (x.clone().requires_grad_(), residual.clone().requires_grad_(),
            post.clone().requires_grad_(), comb.clone().requires_grad_())


def hf_expression(x, residual, post, comb, grad_out):
    """HF transformers eager: coefficients cast to bf16 inside the expression, bf16 matmul over streams.
    comb[s, src, dst] contracts its first stream axis, hence the transpose."""
    x, residual, post, comb = leaves(x, residual, post, comb)
    out = post.to(BF16).unsqueeze(-1) * x.unsqueeze(-2) + torch.matmul(comb.to(BF16).transpose(-1, -2), residual)
    out.backward(grad_out)
    return {"out": out, "grad_x": x.grad, "grad_residual": residual.grad, "grad_post": post.grad,
            "grad_comb": comb.grad}


def deepseek_expression(x, residual, post, comb, grad_out):
    """DeepSeek's fp32 inference reference: the stream mix first (torch.sum over src, dim -3 of
    [S, src, dst, D]), then + post*x, rounded once to bf16."""
    x, residual, post, comb = leaves(x, residual, post, comb)
    mix = torch.sum(comb.unsqueeze(-1) * residual.float().unsqueeze(-2), dim=-3)
    out = (mix + post.unsqueeze(-1) * x.float().unsqueeze(-2)).to(BF16)
    out.backward(grad_out)
    return {"out": out, "grad_x": x.grad, "grad_residual": residual.grad, "grad_post": post.grad,
            "grad_comb": comb.grad}


def seeded_loop(x, residual, post, comb, grad_out, dtype=torch.float32):
    """The seeded loop: the accumulator starts at post*x and adds comb[:, k, :]*residual[:, k] for k
    ascending, one rounding per multiply and per add (PyTorch's CPU kernels do not contract)."""
    x, residual, post, comb = leaves(x, residual, post, comb)
    xw, rw, pw, cw = x.to(dtype), residual.to(dtype), post.to(dtype), comb.to(dtype)
    acc = pw[..., None] * xw[:, None, :]
    for k in range(residual.shape[1]):
        acc = acc + cw[:, k, :, None] * rw[:, k, None, :]
    if dtype == torch.float64:
        # The fp64 policy stores binary64 values (and bf16 ones rounded once from them, which PyTorch's
        # double -> bf16 cast, via float, does not do): compare the binary64 results and gradients, taken
        # at the widened tensors before any cast back.
        for t in (xw, rw, pw, cw):
            t.retain_grad()
        acc.backward(grad_out.to(dtype))
        return {"out_f64": acc, "grad_x_f64": xw.grad, "grad_residual_f64": rw.grad, "grad_post_f64": pw.grad,
                "grad_comb_f64": cw.grad}
    out = acc.to(BF16)
    out.backward(grad_out)
    return {"out": out, "grad_x": x.grad, "grad_residual": residual.grad, "grad_post": post.grad,
            "grad_comb": comb.grad}


# ---- what the bf16 matmul of this shape does here ---------------------------------------------------
# PyTorch 1.13 picks the bf16 bmm kernel by CPU and size: oneDNN where it is built in, the CPU has
# AVX-512 BW/VL/DQ and batch*M*K*N > 4096; else ATen's own loops, which accumulate in bf16. oneDNN in turn
# may use vdpbf16ps (pairs of products, odd one first) or widen to fp32. Rather than re-deriving that
# dispatch, the probe runs the same shapes on inputs whose bf16 result depends on the summation order and
# reports which emulations reproduce it bit for bit. The test requires bit-equality of the bmm-based HF
# tensors only where the probe says PyTorch's bmm is a sequential fp32 sum.

def _rnb(a):
    """RNE float32 -> bf16 -> float32, in numpy (finite values)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def _ordered_sum(terms, order, bf16_accumulator=False):
    acc = np.zeros(terms.shape[:-1], np.float32)  # PyTorch's kernels start from +0
    for k in order:
        acc = (acc + terms[..., k]).astype(np.float32)
        if bf16_accumulator:
            acc = _rnb(acc)
    return acc


def probe_bmm(S, H, D, seed):
    """Which summation the bf16 bmm of the stream mix (comb^T @ residual, [S,H,H] @ [S,H,D]) performs."""
    rng = np.random.default_rng(seed)
    r = np.zeros((S, H, D), np.float32)
    # Even tokens: every column is +-2^j (1, 2^-8, -2^-24, 1.5*2^-24) in streams 0..3. With unit coefficients,
    # a sequential fp32 sum gives 1 + 2^-7 (the -2^-24 meets a tie and stays even, the 1.5*2^-24 then rounds
    # up), vdpbf16ps's order (acc + p1 + p0, then + p3 + p2) gives 1, and a bf16 accumulator gives 1.
    pattern = np.array([1.0, 2.0 ** -8, -(2.0 ** -24), 1.5 * 2.0 ** -24], np.float32)[: min(H, 4)]
    scale = (rng.choice([-1.0, 1.0], (S, 1, D)) * np.exp2(rng.integers(-4, 5, (S, 1, D)))).astype(np.float32)
    r[0::2, : len(pattern), :] = (pattern[None, :, None] * scale)[0::2]
    # Odd tokens: random values and random bf16 coefficients in [1, 2): products need 16 bits, which separates a
    # bf16 accumulator from an fp32 one even for two terms.
    r[1::2] = rng.standard_normal((S // 2, H, D)).astype(np.float32)
    r = _rnb(r)
    cbt = np.ones((S, H, H), np.float32)
    cbt[1::2] = _rnb(1.0 + rng.random((S // 2, H, H)).astype(np.float32))
    got = torch.matmul(torch.from_numpy(cbt).to(BF16), torch.from_numpy(r).to(BF16)).float().numpy()
    terms = np.moveaxis(cbt[:, :, :, None] * r[:, None, :, :], 2, 3)  # [S, dst, D, src], exact products
    seq = list(range(H))
    pairswap = [j for i in range(0, H, 2) for j in ([i + 1, i] if i + 1 < H else [i])]
    candidates = {
        "fp32-sequential": _rnb(_ordered_sum(terms, seq)),
        "fp32-pairswap": _rnb(_ordered_sum(terms, pairswap)),  # vdpbf16ps: acc + p[2i+1] + p[2i]
        "bf16-accumulate": _ordered_sum(_rnb(terms), seq, bf16_accumulator=True),
    }
    matches = [name for name, v in candidates.items() if np.array_equal(v.view(np.uint32), got.view(np.uint32))]
    return ",".join(matches) if matches else "unknown"


def probe_bmm_over_d(S, H, D, seed):
    """Whether the bf16 bmm of the comb gradient (grad_out @ residual^T, a sum over D) accumulates in bf16
    (ATen's own kernel: every product and partial sum rounded to bf16) or in fp32 (oneDNN, order unknown)."""
    rng = np.random.default_rng(seed)
    a = _rnb(rng.standard_normal((S, H, D)).astype(np.float32))
    b = _rnb(rng.standard_normal((S, H, D)).astype(np.float32))
    got = torch.matmul(torch.from_numpy(a).to(BF16), torch.from_numpy(b).to(BF16).transpose(-1, -2)).float().numpy()
    acc = np.zeros((S, H, H), np.float32)
    for d in range(D):
        acc = _rnb(acc + _rnb(a[:, :, None, d] * b[:, None, :, d]))
    return "bf16-accumulate" if np.array_equal(acc.view(np.uint32), got.view(np.uint32)) else "fp32"


# ---- driver ---------------------------------------------------------------------------------------

def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_refs.py DIR")
    root = sys.argv[1]
    # One thread: reductions split across threads could change PyTorch's order between runs and machines.
    torch.set_num_threads(1)
    with open(os.path.join(root, "torch_env.txt"), "w") as env:
        env.write(f"torch={torch.__version__}\n")
        env.write(f"mkldnn={torch.backends.mkldnn.is_available()}\n")
        env.write(f"machine={platform.machine()} processor={platform.processor() or 'unknown'}\n")
        env.write("config=" + " | ".join(l.strip() for l in torch.__config__.show().splitlines()
                                         if "CPU capability" in l or "MKL-DNN" in l) + "\n")
    for name, S, H, D, inputs in configurations(root):
        base = os.path.join(root, name)
        # bf16 tensors from float32 arrays: exact, every value is a bf16 value.
        x, residual, grad_out = (torch.from_numpy(inputs[k].copy()).to(BF16) for k in ("x", "residual", "grad_out"))
        post, comb = (torch.from_numpy(inputs[k].copy()) for k in ("post", "comb"))
        refs = {
            "hf": hf_expression(x, residual, post, comb, grad_out),
            "deepseek": deepseek_expression(x, residual, post, comb, grad_out),
            "seeded": seeded_loop(x, residual, post, comb, grad_out),
            "fp64": seeded_loop(x, residual, post, comb, grad_out, dtype=torch.float64),
        }
        for ref, tensors in refs.items():
            for tensor, value in tensors.items():
                write_tensor(f"{base}.{ref}.{tensor}", value)
        with open(base + ".probe", "w") as probe:
            probe.write(f"hf_bmm={probe_bmm(S, H, D, seed=S * 1000003 + H * 1009 + D)}\n")
            probe.write(f"hf_bmm_over_d={probe_bmm_over_d(S, H, D, seed=S * 1000033 + H * 1013 + D)}\n")


if __name__ == "__main__":
    main()
