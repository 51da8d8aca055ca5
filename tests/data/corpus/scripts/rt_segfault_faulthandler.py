# label: runtime_crash
# subcategory: process killed by SIGSEGV after torch.compile ran; faulthandler prints the Python stack
# python_flags: -X faulthandler
import ctypes

import torch


@torch.compile(backend="eager")
def forward(x):
    return torch.tanh(x) * 2


def crash():
    return ctypes.string_at(0)


if __name__ == "__main__":
    forward(torch.randn(4))
    crash()
