"""One function recompiled for three different reasons.

Used to produce the stored recompile logs (see README.md):
  call 2: tensor shape changes   (size mismatch)
  call 3: tensor dtype changes   (dtype mismatch)
  call 4: Python int changes     (scale == 2 guard fails)
"""

import torch


@torch.compile(backend="eager")
def g(x, scale):
    return x * scale


if __name__ == "__main__":
    g(torch.ones(3), 2)
    g(torch.ones(4), 2)
    g(torch.ones(4, dtype=torch.float64), 2)
    g(torch.ones(4, dtype=torch.float64), 3)
