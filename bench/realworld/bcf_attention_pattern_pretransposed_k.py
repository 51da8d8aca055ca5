# Source: https://github.com/pytorch/pytorch/issues/195282
# Label: backend_compiler_failed
# Failure: hand-written multi-head attention that permutes K straight into (B, H, D, T) so the score matmul
#   needs no transpose: eager and aot_eager run, but Inductor fails (the issue saw the broadcasting matmul
#   rejected during fake-tensor tracing; on 2.13 the rejection comes from Inductor's joint-graph pattern
#   matcher: "Attempting to broadcast a dimension of length 16").
# Why this label: BackendCompilerFailed from Inductor's graph passes on valid code that aot_eager runs.
import torch

B, T, H, D = 1, 16, 4, 8
E = H * D


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(E, E, bias=False)
        self.k = torch.nn.Linear(E, E, bias=False)
        self.v = torch.nn.Linear(E, E, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, H, D).permute(0, 2, 1, 3)
        k = self.k(x).view(b, t, H, D).permute(0, 2, 3, 1)
        v = self.v(x).view(b, t, H, D).permute(0, 2, 1, 3)
        w = (torch.matmul(q, k) * D**-0.5).softmax(dim=-1)
        return (w @ v).permute(0, 2, 1, 3).reshape(b, t, E)


m = Attention().eval()
x = torch.randn(B, T, E)
with torch.no_grad():
    print("eager:", m(x).shape)
    print("compiled:", torch.compile(m)(x).shape)
