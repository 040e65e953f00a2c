import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Scaled Swish (SiLU) activation: y = x * sigmoid(x) * scale.

    Eager PyTorch runs this as three elementwise kernels (sigmoid, multiply, multiply by the scalar),
    each reading and writing the whole tensor; one fused kernel reads x once and writes y once.
    """

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) * self.scale


# Deliberately not multiples of 4: a float4-vectorised kernel must handle the scalar tail.
batch_size = 4095
dim = 6143
scale = 1.75


def get_inputs() -> list[torch.Tensor]:
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs() -> list[float]:
    return [scale]
