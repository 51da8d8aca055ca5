"""Process dies with SIGSEGV after compilation (simulated crash in compiled code).

Category: runtime_crash (hard crash, no Python traceback).

A real segfault inside generated code (a bad pointer in an Inductor kernel, a
miscompiled custom op, ...) kills the interpreter without any Python
exception.  To get one deterministically on any machine, this script compiles
and runs a small function with backend "eager" and then dereferences a NULL
pointer through ``ctypes.string_at(0)``: a genuine SIGSEGV delivered to the
process right after compiled code ran.  ``faulthandler`` is enabled so the
Python stack of the crashing thread is printed, as it would be for a crash in
a compiled kernel.

Expected: killed by SIGSEGV -- exit status -11 from subprocess (139 from a
shell), stderr starts with "Fatal Python error: Segmentation fault".
"""

import ctypes
import faulthandler

import torch

faulthandler.enable()


@torch.compile(backend="eager")
def f(x):
    return torch.sin(x) + 1


def crash_in_compiled_code(x):
    y = f(x)  # compiled and run successfully
    ctypes.string_at(0)  # SIGSEGV: read from address 0
    return y


if __name__ == "__main__":
    crash_in_compiled_code(torch.ones(4))
