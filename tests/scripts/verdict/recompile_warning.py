"""Exits 0, but Dynamo hits its recompile limit and says so only in a warning on stderr."""

import torch
import torch._dynamo.config as dynamo_config

dynamo_config.recompile_limit = 2
dynamo_config.automatic_dynamic_shapes = False


@torch.compile(backend="eager")
def scale(x, factor):
    return x * factor


if __name__ == "__main__":
    x = torch.ones(3)
    for factor in range(1, 6):
        scale(x, factor)
    print("done")
