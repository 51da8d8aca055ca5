# Source: https://github.com/pytorch/pytorch/issues/108650
# Label: graph_break
# Failure: a logging.Logger call inside a compiled forward (as in a diffusion UNet that logs about
#   upsampling) is not traceable, so Dynamo splits the graph there. Nothing fails: the break appears only
#   with TORCH_LOGS=graph_breaks; the script exits 0.
# Why this label: a silent graph break.
import logging

import torch

log = logging.getLogger("unet")


class Up(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        h = self.conv(x)
        if h.shape[-1] % 2:
            log.info("odd width: forwarding upsample size")
        h = torch.nn.functional.interpolate(h, scale_factor=2.0)
        return torch.relu(h)


net = torch.compile(Up(), backend="eager")
print(net(torch.randn(1, 4, 7, 7)).shape)
