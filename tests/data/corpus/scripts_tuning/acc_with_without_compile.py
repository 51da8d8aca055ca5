# label: accuracy
# subcategory: the script prints its result without and with torch.compile, labelled that way, and
#   exits 0: a forward that fills a parameter's data and then adds to a buffer in place returns a
#   result of another shape when compiled (aot_eager); the bug of bench/realworld's
#   acc_param_fill_then_buffer_add.py, printed instead of asserted
import torch


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.tensor(1.0))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.gain.data.fill_(1.0)
        self.calls += 1
        return (x * 2).pow(1)


x = torch.arange(5.0)
print("Without compile:", Counter()(x))
print("With compile:", torch.compile(Counter(), backend="aot_eager")(x))
