"""Dynamo control flow, graph breaks, inlining and builtins: compile(eager) against eager."""

import itertools
import math
import operator
import sys

import torch


def check(name, got, want):
    try:
        torch.testing.assert_close(got, want)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def helper(x, *args, scale=1, **kwargs):
    out = x * scale
    for a in args:
        out = out + a
    return out - kwargs.get("shift", 0)


def control(x, n):
    acc = x
    for i in range(n):
        if i % 2 == 0:
            acc = acc + i
        elif i == 3:
            continue
        else:
            acc = acc * 0.5
        if i >= 4:
            break
    while n > 1:
        n -= 2
        acc = acc - 1
    return helper(acc, 1, 2, scale=3, shift=n), not (n < 0), -n, abs(n - 5), n ** 2, 7 // (n + 2)


def builtins_(x):
    vals = [3, 1, 2]
    out = x * max(vals) + min(vals) * sum(vals)
    out = out + math.sqrt(16) + len(list(zip(vals, vals, strict=True)))
    pairs = list(itertools.product([1, 2], [3]))
    out = out + functools_reduce(pairs)
    out = out * float(isinstance(x, torch.Tensor)) + int(any(v > 2 for v in vals)) + int(all(v > 2 for v in vals))
    out = out + operator.mul(2, 3) + (5 & 3) + (5 | 2) + (5 ^ 1) + (1 << 3) + (64 >> 2)
    return out, x.size(0) * 2 - 1, x.dim(), x.numel() % 3, x.dtype == torch.float32, x.shape[-1] != 4


def functools_reduce(pairs):
    total = 0
    for a, b in pairs:
        total += a * b
    return total


def graph_break(x):
    y = x.sum()
    print("", end="")
    z = x.exp() if y.item() > 0 else x.neg()
    return z[1:3], x[::2], x[..., None], x.unsqueeze(0).expand(2, -1)


def gen(x):
    def g():
        for i in range(3):
            yield x + i

    return sum(list(g())), [t * 2 for t in g() if True]


def run():
    torch.manual_seed(0)
    x = torch.randn(6)
    for n in (0, 1, 5, 8):
        check(f"control{n}", torch.compile(control, backend="eager")(x, n), control(x, n))
    check("builtins", torch.compile(builtins_, backend="eager")(x), builtins_(x))
    for v in (x, -x.abs()):
        check("graph_break", torch.compile(graph_break, backend="eager")(v), graph_break(v))
    check("gen", torch.compile(gen, backend="eager")(x), gen(x))


if __name__ == "__main__":
    run()
