"""Which of Inductor's functions wrote each line of generated code, and which made the code text in it.

`install(out, during_codegen)` (called by `launcher.py --kernel-origins FILE`) sets a profile hook for
`GraphLowering.codegen` alone, so it costs nothing outside code generation. While it runs, the hook records:
- `wrote`: for each line given to `IndentedBuffer.writeline` (stripped), the innermost function of
  torch/_inductor outside the buffer's own methods that first wrote it (the statement's author: a
  kernel's loop header, its store); a kernel's code spliced into the wrapper is not a new author's;
- `made`: for each string of code a function of torch/_inductor returned first (a string passed on
  by its caller is not made again), that function (the expression's author: the op override that
  returned `tmp0 + decltype(tmp0)(1)` for relu, the index or mask a Triton kernel loads with).
At exit FILE holds {"torch": "<torch's parent>", "wrote": {line: [[file, function, def_line, line, n],
...]}, "made": {text: [[file, function, def_line, n], ...]}}. The server matches a kernel's lines against
both. Runs in the interpreter under investigation; imports nothing from pt2_bug_basher.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from collections.abc import Callable

MAX_TEXTS = 200_000  # distinct lines, and distinct texts, kept
# IndentedBuffer's own ways in (a subclass's override too): the author is whoever called them
_BUFFER_METHODS = {"writeline", "writelines", "newline", "splice", "writeline_jit", "splice_jit", "writeline_aot",
                   "splice_aot"}


def install(out: str, during_codegen: Callable[[Callable], None]) -> None:
    """`during_codegen(hook)`: the hook as the profile hook while GraphLowering.codegen runs (bisect_probe's)."""
    import torch._inductor
    from torch._inductor.utils import IndentedBuffer

    root = os.path.dirname(os.path.abspath(torch._inductor.__file__)) + os.sep
    parent = os.path.dirname(os.path.dirname(root.rstrip(os.sep)))
    utils_file = os.path.abspath(sys.modules[IndentedBuffer.__module__].__file__ or "")
    writeline = IndentedBuffer.writeline.__code__
    wrote: dict[str, dict[tuple, int]] = {}
    made: dict[str, dict[tuple, int]] = {}
    owned: dict[int, str] = {}  # id of a returned string -> it (kept alive, so the id names that string only)

    def author(frame) -> tuple | None:
        while frame is not None and (frame.f_code.co_filename == utils_file or frame.f_code.co_name in _BUFFER_METHODS):
            frame = frame.f_back
        if frame is None or not frame.f_code.co_filename.startswith(root):
            return None
        code = frame.f_code
        return (code.co_filename, getattr(code, "co_qualname", code.co_name), code.co_firstlineno, frame.f_lineno)

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code is writeline:
            caller = frame.f_back
            if (caller is not None and caller.f_code.co_name == "splice"
                    and isinstance(caller.f_locals.get("other_code"), IndentedBuffer)):
                return  # a buffer's lines copied into another: written before, by their author
            line = frame.f_locals.get("line")
            text = getattr(line, "line", line)  # a DeferredLine keeps its text in .line
            if isinstance(text, str) and any(c.isalnum() for c in text):
                key = text.strip()
                if key not in wrote and len(wrote) < MAX_TEXTS:
                    who = author(frame.f_back)
                    if who is not None:
                        wrote[key] = {who: 1}
                elif key in wrote:
                    # the same line again: its first author's once more (code text spliced whole into the
                    # wrapper, or a kernel's lines written twice, is not a new author's)
                    first = next(iter(wrote[key]))
                    wrote[key][first] += 1
        elif (event == "return" and type(arg) is str and id(arg) not in owned and code.co_filename.startswith(root)
              and code.co_filename != utils_file):
            key = arg.strip()
            if len(key) > 2 and not key.isidentifier() and (key in made or len(made) < MAX_TEXTS):
                owned[id(arg)] = arg
                who = (code.co_filename, getattr(code, "co_qualname", code.co_name), code.co_firstlineno)
                entry = made.setdefault(key, {})
                entry[who] = entry.get(who, 0) + 1

    during_codegen(profile)

    def rel(path: str) -> str:
        return os.path.relpath(path, parent).replace(os.sep, "/")

    def save() -> None:
        data = {"torch": parent,
                "wrote": {text: [[rel(f), name, first, line, n] for (f, name, first, line), n in who.items()]
                          for text, who in wrote.items()},
                "made": {text: [[rel(f), name, first, n] for (f, name, first), n in who.items()]
                         for text, who in made.items()}}
        tmp = out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, out)

    atexit.register(save)
