"""Dynamo features (closures, globals, containers, side effects, guards): compile(eager) against eager."""

import sys

import torch

SCALE = 2.0
LOG: list = []


def check(name, got, want):
    try:
        torch.testing.assert_close(got, want)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


def closure(x):
    k = 3

    def inner(y):
        return y * k + SCALE

    return inner(x) - inner(x.flip(0))


def containers(x):
    d = {"a": x, "b": x + 1}
    lst = [x, x * 2, *[x - 1]]
    t = tuple(v.sum() for v in lst)
    d["c"] = t[0] + t[1]
    s = 0
    for k, v in sorted(d.items()):
        s = s + v.sum() * len(k)
    return s, lst[-1], len(lst) > 2, d.get("missing", x)[0]


def side_effects(x, state):
    LOG.append(x.shape[0])
    state["n"] = state.get("n", 0) + 1
    state["t"] = x.cos()
    return x.sin() + len(LOG)


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = self.lin(x)
        if self.training:
            y = y * 2
        return y.relu() + self.calls


def guards(x, flag, n):
    if flag:
        x = x + n
    if x.shape[0] > 3:
        return x * 2
    return x.min(dim=0).values, x.max()


def run():
    torch.manual_seed(0)
    x = torch.randn(5)
    check("closure", torch.compile(closure, backend="eager")(x), closure(x))
    check("containers", torch.compile(containers, backend="eager")(x), containers(x))

    LOG.clear()
    s1: dict = {}
    got = torch.compile(side_effects, backend="eager")(x, s1)
    log1 = list(LOG)
    LOG.clear()
    s2: dict = {}
    want = side_effects(x, s2)
    check("side_effects", (got, s1["n"], s1["t"], log1), (want, s2["n"], s2["t"], list(LOG)))

    torch.manual_seed(0)
    m = Counter()
    cm = torch.compile(m, backend="eager")
    inp = torch.randn(2, 4)
    got = [cm(inp), cm(inp)]
    m.eval()
    got.append(cm(inp))
    torch.manual_seed(0)
    ref = Counter()
    want = [ref(inp), ref(inp)]
    ref.eval()
    want.append(ref(inp))
    check("module", got, want)

    g = torch.compile(guards, backend="eager")
    for args in [(torch.ones(5), True, 2), (torch.ones(5), False, 2), (torch.ones(2, 3), True, 1),
                 (torch.ones(2, 3), True, 4), (torch.ones(7), True, 1.5)]:
        check(f"guards{tuple(getattr(a, 'shape', a) for a in args)}", g(*args), guards(*args))


if __name__ == "__main__":
    run()
