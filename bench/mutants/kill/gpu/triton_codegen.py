"""Triton code generation on CUDA against eager: masks (odd sizes), index expressions (broadcast, strided,
transposed, dynamic shapes), persistent and looped reductions, scans, indexing with atomics, integer and
half-precision dtypes, forward and backward."""

import sys

import torch


def check(name, got, want, tol=1e-4):
    try:
        torch.testing.assert_close(got, want, equal_nan=True, atol=tol, rtol=tol)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def pointwise(x, y, z):
    a = torch.where(x > 0, x * y, y - x) + z[:, None]
    b = (a.t() * 2).contiguous()
    c = x[::2, 1::3].exp()
    e = torch.remainder(torch.arange(x.shape[1], device=x.device), 7).float()
    return a, b, c, a + e, torch.clamp(x, -0.5, 0.5).sigmoid()


def reductions(x):
    mean_var = torch.var_mean(x, 1)
    return (x.sum(1), x.amax(0), x.argmax(1), x.argmin(0), mean_var[0], mean_var[1], x.softmax(-1),
            x.logsumexp(0), (x > 0).any(1), x.abs().prod(1), x.min(1).values)


def long_reductions(v, m):
    return v.sum(), v.max(), v.argmax(), v.mean(), m.sum(1), m.var(0), m.norm(dim=1)


def scans(x):
    return x.cumsum(1), x.cumprod(0), torch.cummax(x, 1).values, x.flip(1).cumsum(1)


def indexing(x, idx, src):
    out = torch.zeros(17, x.shape[1], device=x.device).index_add(0, idx % 17, x[: idx.shape[0]])
    return x[idx], x.index_select(1, idx[:5]), torch.gather(x, 1, idx[:, None].expand(-1, 3) % x.shape[1]), \
        out, torch.zeros(32, device=x.device).scatter_add(0, idx % 32, src)


def integers(i, j):
    return (i * 3) // 2, i % 5, i & j, i | 7, i >> 1, (i.to(torch.int32) + j.to(torch.int32)), i.sum(0), \
        torch.maximum(i, j), (i == j).sum()


def halves(h, b):
    return (h * h + 1).to(torch.float32), h.softmax(-1), b.sum(1), (b.float() * 2).to(torch.bfloat16), \
        torch.nn.functional.gelu(h)


def normed(x, w, bias):
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], w, bias)
    return torch.nn.functional.silu(y).softmax(-1)


def compiled(fn, **kwargs):
    return torch.compile(fn, backend="inductor", **kwargs)


def run():
    torch.manual_seed(0)
    dev = "cuda"
    x, y, z = torch.randn(37, 53, device=dev), torch.randn(37, 53, device=dev), torch.randn(37, device=dev)
    check("pointwise", compiled(pointwise)(x, y, z), pointwise(x, y, z))
    check("reductions", compiled(reductions)(x), reductions(x))
    v, m = torch.randn(100003, device=dev), torch.randn(19, 4099, device=dev)
    check("long_reductions", compiled(long_reductions)(v, m), long_reductions(v, m), tol=1e-3)
    check("scans", compiled(scans)(x[:, :9] * 0.5), scans(x[:, :9] * 0.5), tol=1e-3)
    idx, src = torch.randint(0, 37, (23,), device=dev), torch.randn(23, device=dev)
    check("indexing", compiled(indexing)(x, idx, src), indexing(x, idx, src), tol=1e-3)
    i, j = torch.randint(-50, 50, (29, 31), device=dev), torch.randint(-50, 50, (29, 31), device=dev)
    check("integers", compiled(integers)(i, j), integers(i, j))
    h, b = torch.randn(21, 67, device=dev, dtype=torch.float16), torch.randn(21, 67, device=dev, dtype=torch.bfloat16)
    check("halves", compiled(halves)(h, b), halves(h, b), tol=2e-2)
    dyn = compiled(pointwise, dynamic=True)
    for rows, cols in ((37, 53), (11, 70)):
        a, c = torch.randn(rows, cols, device=dev), torch.randn(rows, cols, device=dev)
        d = torch.randn(rows, device=dev)
        check(f"dynamic {rows}x{cols}", dyn(a, c, d), pointwise(a, c, d))
    xs = torch.randn(6, 45, device=dev, requires_grad=True)
    w = torch.randn(45, device=dev, requires_grad=True)
    bias = torch.randn(45, device=dev, requires_grad=True)
    refs = [t.detach().clone().requires_grad_(True) for t in (xs, w, bias)]
    got, want = compiled(normed)(xs, w, bias), normed(*refs)
    check("normed", got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    check("normed grads", [t.grad for t in (xs, w, bias)], [t.grad for t in refs], tol=1e-3)


if __name__ == "__main__":
    run()
