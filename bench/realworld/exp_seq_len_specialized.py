# Source: https://github.com/pytorch/pytorch/issues/140011
# Label: export
# Failure: the sequence dimension is declared dynamic (Dim with max=128), but the model builds a position
#   buffer of a fixed length and adds it, which forces seq_len to equal that length; export reports
#   "Constraints violated (seq_len)! ... inferred to be a constant" with a suggested fix.
# Why this label: a torch.export dynamic_shapes constraint violation.
import torch


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(100, 8)
        self.pos = torch.nn.Parameter(torch.zeros(6, 8))

    def forward(self, input_ids):
        return self.tok(input_ids) + self.pos


ids = torch.randint(0, 100, (2, 6))
seq_len = torch.export.Dim("seq_len", max=128)
program = torch.export.export(Embed(), (ids,), dynamic_shapes={"input_ids": {1: seq_len}})
print(program)
