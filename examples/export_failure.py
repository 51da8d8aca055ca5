"""torch.export on data-dependent Python control flow fails.

Category: export.

``torch.export.export(..., strict=True)`` traces the module with Dynamo and
requires one graph with no Python fallbacks.  ``forward`` branches on a
tensor value (``x.sum() > 0``); export cannot decide which branch to record,
so it raises instead of producing an ExportedProgram.  (``torch.cond`` is the
supported way to express this.)

Expected: exits non-zero with ``torch._dynamo.exc.Unsupported:
Data-dependent branching`` (with "Explanation:" / "Hint: Use `torch.cond`").
The partially traced graph is printed to stdout before the error.
"""

import torch


class M(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow
            return x.sin()
        return x.cos()


if __name__ == "__main__":
    torch.export.export(M(), (torch.randn(4),), strict=True)
