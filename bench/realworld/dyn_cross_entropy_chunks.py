# Source: https://github.com/pytorch/pytorch/issues/141034
# Label: dynamic_shapes
# Failure: chunked cross-entropy where only the label chunk is marked dynamic: cross_entropy ties the label
#   length to the (static) logits chunk, so Dynamo specialises it and raises ConstraintViolationError
#   ("You marked ... as dynamic but your code specialized it to be a constant").
# Why this label: a mark_dynamic constraint violation under plain torch.compile.
import torch
import torch.nn.functional as F


def chunk_loss(logits, labels):
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


vocab = 10
logits = torch.randn(2, 16, vocab)
labels = torch.randint(0, vocab, (2, 16))
logit_chunks = [c.reshape(-1, vocab) for c in logits.chunk(8, dim=1)]
label_chunks = [c.reshape(-1) for c in labels.chunk(8, dim=1)]
loss_fn = torch.compile(chunk_loss, backend="eager")
total = 0.0
for lg, lb in zip(logit_chunks, label_chunks, strict=True):
    torch._dynamo.mark_dynamic(lb, 0)
    total += loss_fn(lg, lb).item()
print(total)
