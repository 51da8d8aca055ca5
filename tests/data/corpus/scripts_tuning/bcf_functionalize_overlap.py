# label: backend_compiler_failed
# subcategory: AOTAutograd's functionalization refuses an in-place op on a view whose elements overlap
#   (unfold with a step smaller than the window) while the graph compiles (aot_eager); eager runs it.
#   People often paste only the RuntimeError line, without the BackendCompilerFailed line above it
# tail: 12
import torch


def f(x):
    windows = x.unfold(0, 4, 1)  # each element is in up to four windows
    windows.abs_()
    return x


print(torch.compile(f, backend="aot_eager")(torch.randn(8)))
