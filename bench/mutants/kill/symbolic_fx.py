"""Symbolic shapes (dynamic=True) under AOTAutograd, plus FX symbolic_trace and make_fx, against eager."""

import sys

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx


def check(name, got, want):
    try:
        torch.testing.assert_close(got, want)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def shapes(x, y):
    n, m = x.shape
    z = x.reshape(-1, 2) if (n * m) % 2 == 0 else x.flatten()[:2].reshape(1, 2)
    w = torch.cat([y, y[: n // 2]], 0)
    k = max(n - 1, 1)
    return z.sum(0) * k, w.narrow(0, 1, n - 1), x.new_zeros(n + m), x[:, -1] * (m // 2), w.view(-1, 1).expand(-1, 3)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        y = self.lin(x)
        for i in range(2):
            y = torch.nn.functional.relu(y) + i
        return y.transpose(0, 1)[0] * x.size(1)


def run():
    torch.manual_seed(0)
    f = torch.compile(shapes, backend="aot_eager", dynamic=True)
    for n, m in ((4, 3), (6, 5), (3, 2), (8, 3)):
        x, y = torch.randn(n, m, requires_grad=True), torch.randn(n)
        got, want = f(x, y), shapes(x, y)
        check(f"shapes{n}x{m}", got, want)
        ga = torch.autograd.grad(got[0].sum() + got[3].sum(), x)
        gb = torch.autograd.grad(want[0].sum() + want[3].sum(), x)
        check(f"shapes grad {n}x{m}", ga, gb)

    net = Net()
    gm = torch.fx.symbolic_trace(net)
    gm.graph.lint()
    gm.recompile()
    x = torch.randn(4, 3)
    check("symbolic_trace", gm(x), net(x))
    gm2 = make_fx(shapes, tracing_mode="symbolic")(torch.randn(4, 3), torch.randn(4))
    x, y = torch.randn(6, 3), torch.randn(6)
    check("make_fx symbolic", gm2(x, y), shapes(x, y))
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(gm).propagate(x)
    shapes_seen = [tuple(n.meta["tensor_meta"].shape) for n in gm.graph.nodes if "tensor_meta" in n.meta]
    if shapes_seen[-1] != tuple(net(x).shape):
        print(f"WRONG RESULT shape_prop: {shapes_seen[-1]}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    run()
