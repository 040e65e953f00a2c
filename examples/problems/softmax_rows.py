import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Softmax over the last dimension of a 2-D tensor (a row reduction followed by a row-wise map).
    """

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 8192


def get_inputs() -> list[torch.Tensor]:
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs() -> list[int]:
    return []
