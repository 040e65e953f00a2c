"""Tensor element types shared by the harness and the candidate ABI (the KBDtype codes of kb_abi.h)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelblaster.tools.errors import UserFacingError


@dataclass(frozen=True)
class DtypeInfo:
    name: str
    code: int
    c_type: str
    torch_dtype: torch.dtype

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()


_DTYPES = (
    DtypeInfo("float32", 0, "float", torch.float32),
    DtypeInfo("float16", 1, "__half", torch.float16),
    DtypeInfo("bfloat16", 2, "__nv_bfloat16", torch.bfloat16),
    DtypeInfo("float64", 3, "double", torch.float64),
    DtypeInfo("int8", 4, "int8_t", torch.int8),
    DtypeInfo("uint8", 5, "uint8_t", torch.uint8),
    DtypeInfo("int16", 6, "int16_t", torch.int16),
    DtypeInfo("int32", 7, "int32_t", torch.int32),
    DtypeInfo("int64", 8, "int64_t", torch.int64),
    DtypeInfo("bool", 9, "bool", torch.bool),
)
_BY_NAME = {info.name: info for info in _DTYPES}
_BY_TORCH = {info.torch_dtype: info for info in _DTYPES}


def dtype_info(name: str) -> DtypeInfo:
    return _BY_NAME[name]


def dtype_of_tensor(tensor: torch.Tensor) -> DtypeInfo:
    try:
        return _BY_TORCH[tensor.dtype]
    except KeyError:
        supported = ", ".join(_BY_NAME)
        message = f"tensor dtype {tensor.dtype} is not supported by the candidate ABI ({supported})"
        raise UserFacingError(message) from None
