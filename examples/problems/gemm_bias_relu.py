import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Linear layer followed by ReLU: y = relu(x @ W^T + b), W of shape (out_features, in_features).

    A candidate can fuse the bias add and the ReLU into the GEMM's epilogue.
    """

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 2048
in_features = 2048
out_features = 2048


def get_inputs() -> list[torch.Tensor]:
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs() -> list[int]:
    return [in_features, out_features]
