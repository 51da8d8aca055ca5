"""A small model (matmul, norms, softmax, views, reductions) compiled by Inductor, forward and backward."""

import sys

import torch


def check(name, got, want):
    try:
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    except AssertionError as err:
        print(f"WRONG RESULT {name}: {err}", file=sys.stderr)
        sys.exit(3)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=-1)
        att = (q @ k.transpose(-1, -2)) / c ** 0.5
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = self.out(att @ v) + x
        y = self.bn(y.transpose(1, 2).reshape(b, c * t // 6, 6).transpose(1, 2)).transpose(1, 2).reshape(b, t, c)
        z = torch.cat([y[:, ::2], y[:, 1::2].flip(1)], dim=1).permute(0, 2, 1).contiguous()
        return z.sum(dim=(1,)) * z.amax(1) - z.var(1) + torch.where(z > 0, z, z * 0.1).mean(1)


def run():
    torch.manual_seed(0)
    model = Block()
    ref = Block()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 6, 8, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    got = torch.compile(model, backend="inductor")(x)
    want = ref(xr)
    check("forward", got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    check("grad x", x.grad, xr.grad)
    check("grads", [p.grad for p in model.parameters()], [p.grad for p in ref.parameters()])
    check("buffers", list(model.buffers()), list(ref.buffers()))
    with torch.no_grad():
        model.eval()
        ref.eval()
        x2 = torch.randn(3, 6, 8)
        check("eval", torch.compile(model, backend="inductor")(x2), ref(x2))


if __name__ == "__main__":
    run()
