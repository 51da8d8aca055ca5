# Source: https://github.com/pytorch/pytorch/issues/197738
# Label: accuracy
# Failure: a forward that first does param.data.fill_() and then an in-place add on a buffer returns a
#   tensor of the wrong shape when compiled (a 0-d value instead of the input-shaped result).
# Why this label: compiled output silently differs from eager; torch.testing.assert_close fails on shape.
import torch


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.tensor(1.0))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.gain.data.fill_(1.0)
        self.calls += 1
        return (x * 2).pow(1)


x = torch.arange(5.0)
expected = Counter()(x)
got = torch.compile(Counter(), backend="aot_eager")(x)
print("eager:", expected, "compiled:", got)
torch.testing.assert_close(got, expected)
