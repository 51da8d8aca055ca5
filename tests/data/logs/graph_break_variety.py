"""Three kinds of graph break in one function, compiled twice (float32, float64).

Used to produce the stored graph-break logs (see README.md).  The dtype change
makes Dynamo recompile the function and its resume functions, so every graph
break is reported twice: 3 unique breaks, 6 in total.
"""

import torch


@torch.compile(backend="eager")
def f(x):
    x = x + 1
    print("x:", x)  # graph break: builtin print
    if x.sum() > 0:  # graph break: data-dependent branching
        x = x * 2
    n = len(memoryview(b"pt2"))  # graph break: unsupported builtin
    return x + n


if __name__ == "__main__":
    f(torch.ones(2))
    f(torch.ones(2, dtype=torch.float64))
