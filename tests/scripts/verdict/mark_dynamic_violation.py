"""A dimension marked dynamic that the program specialises: a constraint violation under torch.compile."""

import torch


@torch.compile(backend="eager")
def head(x):
    if x.shape[0] == 4:
        return x * 2
    return x


if __name__ == "__main__":
    x = torch.ones(4, 3)
    torch._dynamo.mark_dynamic(x, 0)
    head(x)
