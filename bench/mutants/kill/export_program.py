"""torch.export with dynamic shapes: the exported program, run and unflattened, against eager."""

import sys

import torch
from torch.export import Dim, export


def check(name, got, want):
    try:
        torch.testing.assert_close(got, want)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


class Sub(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return self.lin(x).relu()


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Sub()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, y, scale: int = 2):
        h = self.sub(x) * self.w
        n = x.shape[0]
        h = h.reshape(n * 2, 2)[: n + 1]
        if y.shape[0] > 1:
            h = h + y[:1].sum()
        return {"out": h * scale, "rows": torch.arange(n) + 1, "cond": torch.cond(h.sum() > 0, lambda t: t.cos(),
                                                                                   lambda t: t.sin(), (h,))}


def run():
    torch.manual_seed(0)
    m = M()
    ref = M()
    ref.load_state_dict(m.state_dict())
    batch = Dim("batch", min=2, max=64)
    ep = export(m, (torch.randn(3, 4), torch.randn(5)), dynamic_shapes={"x": {0: batch}, "y": None})
    mod = ep.module()
    for n in (3, 7):
        x, y = torch.randn(n, 4), torch.randn(5)
        check(f"exported n={n}", mod(x, y), ref(x, y))
    check("buffer", mod.sub.count, ref.sub.count)
    ep2 = ep.run_decompositions()
    x = torch.randn(4, 4)
    check("decomposed", ep2.module()(x, torch.randn(5)) ["rows"], ref(x, torch.randn(5))["rows"])
    unflat = torch.export.unflatten(ep)
    x, y = torch.randn(5, 4), torch.randn(5)
    check("unflattened", unflat(x, y)["out"], M.forward(ref, x, y)["out"])


if __name__ == "__main__":
    run()
