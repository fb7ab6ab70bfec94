"""Packed causal attention on one GPU: FlashAttention-2 against cuDNN, both through the ATen
operators topotrain calls from C++ (at::_flash_attention_forward/_backward and
at::_cudnn_attention_forward/_backward with cumulative sequence offsets).

For each shape: forward+backward time, TFLOP/s (causal: half the score matrix), the largest
difference between the two backends' outputs and gradients, whether cuDNN accepts grouped
k/v heads directly, and what a first call with an unseen document layout costs (cuDNN builds
an execution plan per shape).

With --dense, only the equal-length case: the packed documents viewed as a [batch, seq] grid
(no offsets), FlashAttention-2 packed against the dense FlashAttention-2 and cuDNN kernels
behind scaled_dot_product_attention.

    python3 bench/models/attention_backends.py [--dense]
"""
import sys
import time

import torch

aten = torch.ops.aten


def packed(tokens, doc_len, hq, hkv, dim, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda h: torch.randn(tokens, h, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    lens = [doc_len] * (tokens // doc_len)
    if tokens % doc_len:
        lens.append(tokens % doc_len)
    cu = torch.tensor([0] + lens, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return mk(hq), mk(hkv), mk(hkv), mk(hq), cu, max(lens), lens


def flash(q, k, v, dout, cu, mx, scale):
    out, lse, seed, offset, _ = aten._flash_attention_forward(q, k, v, cu, cu, mx, mx, 0.0, True, False, scale=scale)
    dq, dk, dv = aten._flash_attention_backward(dout, q, k, v, out, lse, cu, cu, mx, mx, 0.0, True, seed, offset,
                                                scale=scale)
    return out, dq, dk, dv


def cudnn(q, k, v, dout, cu, mx, scale, expand, autograd=False):
    groups = q.size(1) // k.size(1)
    if expand and groups > 1:
        k = k.repeat_interleave(groups, 1)
        v = v.repeat_interleave(groups, 1)
    if autograd:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    r = aten._cudnn_attention_forward(q, k, v, None, cu, cu, mx, mx, True, 0.0, True, False, scale=scale)
    out, lse, seed, offset = r[0], r[1], r[6], r[7]
    if autograd:
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    else:
        # The schema types attn_bias as a (non-optional) Tensor; C++ passes an undefined one.
        try:
            dq, dk, dv = aten._cudnn_attention_backward(dout, q, k, v, out, lse, seed, offset, None, cu, cu, mx, mx,
                                                        0.0, True, scale=scale)
        except RuntimeError:
            dq, dk, dv = aten._cudnn_attention_backward(dout, q, k, v, out, lse, seed, offset, torch.Tensor(), cu, cu,
                                                        mx, mx, 0.0, True, scale=scale)
    if expand and groups > 1:
        dk = dk.unflatten(1, (-1, groups)).sum(2)
        dv = dv.unflatten(1, (-1, groups)).sum(2)
    return out, dq, dk, dv


def timed(fn, reps=10):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def sdpa(backend, q, k, v, dout, doc_len):
    """Equal-length documents as a dense [batch, heads, seq, dim] grid through scaled_dot_product_attention,
    grouped k/v handed over as they are; gradients back in the packed [tokens, heads, dim] layout."""
    from torch.nn.attention import sdpa_kernel
    grid = lambda t: t.detach().view(-1, doc_len, t.size(1), t.size(2)).transpose(1, 2).requires_grad_()
    qg, kg, vg = grid(q), grid(k), grid(v)
    with sdpa_kernel(backend):
        out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True)
    dog = dout.view(-1, doc_len, dout.size(1), dout.size(2)).transpose(1, 2)
    grads = torch.autograd.grad(out, (qg, kg, vg), dog)
    packed_back = lambda t: t.transpose(1, 2).reshape(-1, t.size(1), t.size(3))
    return tuple(packed_back(t) for t in (out, *grads))


def dense_probe():
    from torch.nn.attention import SDPBackend
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    for name, tokens, doc_len, hq, hkv, dim in (("qwen3-0.6b layer", 16384, 2048, 16, 8, 128),
                                                ("moe-500m layer", 16384, 2048, 8, 4, 128),
                                                ("drafter (32/8 heads)", 16384, 4096, 32, 8, 128)):
        q, k, v, dout, cu, mx, lens = packed(tokens, doc_len, hq, hkv, dim)
        scale = dim ** -0.5
        flops = 4 * hq * dim * sum(l * (l + 1) / 2 for l in lens) * 3.5
        ref = flash(q, k, v, dout, cu, mx, scale)
        t = timed(lambda: flash(q, k, v, dout, cu, mx, scale))
        print(f"\n## {name}: tokens {tokens}, docs of {doc_len}, heads {hq}/{hkv}, dim {dim}")
        print(f"{'flash2 packed':24s} {t * 1e3:7.2f} ms  {flops / t / 1e12:6.1f} TFLOP/s")
        for label, backend in (("flash2 dense grid", SDPBackend.FLASH_ATTENTION),
                               ("cudnn dense grid", SDPBackend.CUDNN_ATTENTION)):
            try:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                got = sdpa(backend, q, k, v, dout, doc_len)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0  # with cuDNN: building the plans of a new shape
                t = timed(lambda: sdpa(backend, q, k, v, dout, doc_len))
                errs = " ".join(f"{n} {rel(a, b):.1e}" for n, a, b in zip(("out", "dq", "dk", "dv"), got, ref))
                print(f"{label:24s} {t * 1e3:7.2f} ms  {flops / t / 1e12:6.1f} TFLOP/s  first call {first * 1e3:6.1f} ms"
                      f"  vs flash: {errs}")
            except Exception as e:  # report and go on: the probe is to learn what works
                print(f"{label:24s} FAILED: {str(e).splitlines()[0][:200]}")
    return 0


def main():
    if "--dense" in sys.argv:
        return dense_probe()
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    shapes = [  # name, tokens, doc_len, hq, hkv, dim
        ("qwen3-0.6b layer", 16384, 2048, 16, 8, 128),
        ("moe-500m layer", 16384, 2048, 8, 4, 128),
        ("qwen3-0.6b, ragged docs", 16384, 700, 16, 8, 128),
        ("drafter 1.05B (32/8 heads)", 16384, 4096, 32, 8, 128),
    ]
    for name, tokens, doc_len, hq, hkv, dim in shapes:
        q, k, v, dout, cu, mx, lens = packed(tokens, doc_len, hq, hkv, dim)
        scale = dim ** -0.5
        flops = 4 * hq * dim * sum(l * (l + 1) / 2 for l in lens) * 3.5  # fwd 2 GEMMs + bwd 5
        ref = flash(q, k, v, dout, cu, mx, scale)
        t_flash = timed(lambda: flash(q, k, v, dout, cu, mx, scale))
        print(f"\n## {name}: tokens {tokens}, docs of {doc_len}, heads {hq}/{hkv}, dim {dim}")
        print(f"flash2 fwd+bwd {t_flash * 1e3:7.2f} ms  {flops / t_flash / 1e12:6.1f} TFLOP/s")
        for expand, autograd in ((False, False), (True, False), (True, True)):
            label = ("cudnn, k/v expanded" if expand else "cudnn, grouped k/v") + (", autograd" if autograd else "")
            try:
                got = cudnn(q, k, v, dout, cu, mx, scale, expand, autograd)
                t = timed(lambda: cudnn(q, k, v, dout, cu, mx, scale, expand, autograd))
                errs = " ".join(f"{n} {rel(a, b):.1e}" for n, a, b in zip(("out", "dq", "dk", "dv"), got, ref))
                print(f"{label:32s} {t * 1e3:7.2f} ms  {flops / t / 1e12:6.1f} TFLOP/s  vs flash: {errs}")
            except Exception as e:  # report and go on: the probe is to learn what works
                print(f"{label:32s} FAILED: {str(e).splitlines()[0][:200]}")
    # Plan cost: each new (tokens, documents, longest) layout, cuDNN's first call against later ones.
    print("\n## first call with an unseen layout (qwen3-0.6b heads, k/v expanded)")
    try:
        q, k, v, dout, cu, mx, _ = packed(1024, 512, 16, 8, 128)
        cudnn(q, k, v, dout, cu, mx, 128 ** -0.5, True, True)
    except Exception as e:  # nothing to time
        print("cudnn FAILED:", str(e).splitlines()[0][:200])
        return 0
    for tokens, doc_len in ((16000, 2000), (15872, 1984), (16384, 1024), (12288, 3000)):
        q, k, v, dout, cu, mx, _ = packed(tokens, doc_len, 16, 8, 128, seed=1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        cudnn(q, k, v, dout, cu, mx, 128 ** -0.5, True, True)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        again = timed(lambda: cudnn(q, k, v, dout, cu, mx, 128 ** -0.5, True, True), reps=3)
        # Same token count and longest document, other boundaries: does the plan carry over?
        lens = [doc_len // 2, doc_len // 2 + doc_len % 2] + [doc_len] * (tokens // doc_len - 1)
        lens.append(tokens - sum(lens)) if tokens - sum(lens) > 0 else None
        cu2 = torch.tensor([0] + lens, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        cudnn(q, k, v, dout, cu2, mx, 128 ** -0.5, True, True)
        torch.cuda.synchronize()
        moved = time.perf_counter() - t0
        print(f"tokens {tokens} docs of {doc_len}: first {first * 1e3:8.1f} ms, cached {again * 1e3:6.2f} ms, "
              f"other boundaries ({len(lens)} docs) first {moved * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
