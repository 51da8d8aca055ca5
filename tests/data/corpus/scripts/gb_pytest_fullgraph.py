# label: graph_break
# subcategory: a pytest test compiling with fullgraph=True hits a graph break (pytest-style report)
import sys

import torch


def helper(x):
    return x.tolist()


@torch.compile(backend="eager", fullgraph=True)
def forward(x):
    return torch.tensor(helper(x)) + 1


def test_forward_compiles():
    forward(torch.arange(3.0))


if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--tb=short"]))
