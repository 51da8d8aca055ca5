import torch


def total(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * 2


compiled = torch.compile(total, backend="eager")
two = [torch.ones(3), torch.full((3,), 2.0)]
three = [torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)]
torch.testing.assert_close(compiled(two), total(two))
torch.testing.assert_close(compiled(three), total(three))
print("ok")
