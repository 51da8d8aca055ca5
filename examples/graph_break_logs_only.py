"""Silent graph breaks: the script succeeds, the breaks only show in logs.

Category: graph_break (performance / "why is my model split up?").

Without fullgraph=True Dynamo falls back to eager Python at each unsupported
construct and compiles the pieces around it.  Nothing fails and the script
exits 0, but the function is split into several graphs.  Run it with

    TORCH_LOGS=graph_breaks python examples/graph_break_logs_only.py

to see two distinct graph breaks, each reported in user code of this file:
  1. ``print(...)``              -- a builtin with I/O side effects.
  2. ``if y.sum() > 0``          -- data-dependent branching on a tensor value.
The loop calls ``f`` three times; the breaks are reported once each (the
compiled code is reused on the later calls).  Backend "eager".
"""

import torch


@torch.compile(backend="eager")
def f(x):
    y = torch.cos(x) + 1
    print("y =", y)  # graph break 1
    if y.sum() > 0:  # graph break 2
        y = y * 2
    return torch.relu(y)


if __name__ == "__main__":
    for _ in range(3):
        f(torch.arange(4.0))
    print("done")
