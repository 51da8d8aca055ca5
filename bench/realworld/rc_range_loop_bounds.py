# Source: https://github.com/pytorch/pytorch/issues/114293
# Label: recompile
# Failure: a compiled function loops over range(start + 1, end) with Python ints that change on every call;
#   the loop bound specialises start (guard "start == k"), so each call recompiles until the recompile
#   limit is hit. Dynamo then warns and falls back to eager; the script exits 0.
# Why this label: a silent recompile-limit case (the "hit config.recompile_limit" warning is the only sign).
import torch


@torch.compile(backend="eager")
def window_sum(rows, start, end):
    acc = rows[start]
    for i in range(start + 1, end):
        acc = acc + rows[i]
    return acc


rows = torch.randn(20, 3)
for s in range(12):
    window_sum(rows, s, s + 4)
print("finished")
