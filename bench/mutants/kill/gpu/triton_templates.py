"""Triton matmul templates chosen by autotuning (max-autotune, Triton only), with fused epilogues, odd sizes,
float32 and float16, and coordinate-descent tuning of pointwise and reduction kernels, against eager."""

import sys

import torch
import torch._inductor.config as inductor_config


def check(name, got, want, tol):
    try:
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def mm_epilogue(a, b, bias):
    return torch.relu(a @ b + bias) * 2


def bmm_reduce(a, b):
    return torch.bmm(a, b).sum(-1)


def addmm_chain(x, w1, w2):
    return torch.addmm(w2[0], torch.tanh(x @ w1), w2)


def tuned(x, y):
    return (x * y + 1).sum(1), torch.softmax(x, -1) * y


def run():
    torch.manual_seed(0)
    dev = "cuda"
    inductor_config.max_autotune_gemm_backends = "TRITON"
    inductor_config.coordinate_descent_tuning = True
    opts = {"mode": "max-autotune-no-cudagraphs"}
    for dtype, tol in ((torch.float32, 1e-3), (torch.float16, 2e-2)):
        a, b = torch.randn(67, 96, device=dev, dtype=dtype), torch.randn(96, 80, device=dev, dtype=dtype)
        bias = torch.randn(80, device=dev, dtype=dtype)
        check(f"mm_epilogue {dtype}", torch.compile(mm_epilogue, **opts)(a, b, bias), mm_epilogue(a, b, bias), tol)
        p, q = torch.randn(3, 40, 72, device=dev, dtype=dtype), torch.randn(3, 72, 33, device=dev, dtype=dtype)
        check(f"bmm_reduce {dtype}", torch.compile(bmm_reduce, **opts)(p, q), bmm_reduce(p, q), tol * 10)
        x, w1, w2 = (torch.randn(50, 64, device=dev, dtype=dtype), torch.randn(64, 48, device=dev, dtype=dtype),
                     torch.randn(48, 48, device=dev, dtype=dtype))
        check(f"addmm_chain {dtype}", torch.compile(addmm_chain, **opts)(x, w1, w2), addmm_chain(x, w1, w2), tol * 10)
    x, y = torch.randn(33, 257, device=dev), torch.randn(33, 257, device=dev)
    check("coordinate descent", torch.compile(tuned)(x, y), tuned(x, y), 1e-4)


if __name__ == "__main__":
    run()
