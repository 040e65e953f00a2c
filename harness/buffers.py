"""Device buffers the trusted process owns and shares with the test driver through CUDA IPC.

Each buffer is its own `cuMemAlloc` allocation (not a slice of PyTorch's caching allocator), so the
IPC mapping the driver opens covers exactly that tensor: the reference outputs, which live in PyTorch's
allocator, can never be reached from the driver's process. Torch sees each buffer as a zero-copy view.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field

import torch

from kernelblaster.harness.dtypes import dtype_info
from kernelblaster.harness.spec import ProblemSpec, TensorSpec
from kernelblaster.tools.driver_process import IpcTensor, TensorSet
from kernelblaster.tools.errors import UserFacingError

_IPC_HANDLE_BYTES = 64
_MIN_ALLOCATION = 256


def _libcuda() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise UserFacingError(f"cannot load the CUDA driver library libcuda.so.1 ({error})") from None


def _check(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"{call} failed with CUresult {status}")


class _ByteView:
    """Exposes a raw device pointer through __cuda_array_interface__ as bytes, for torch.as_tensor."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False), "version": 3}


@dataclass
class SharedBuffer:
    spec: TensorSpec
    pointer: int
    nbytes: int
    raw: torch.Tensor = field(repr=False)  # the allocation's bytes, flat uint8
    tensor: torch.Tensor = field(repr=False)  # the same bytes as the spec's dtype and shape
    ipc_handle_hex: str

    def ipc(self) -> IpcTensor:
        return IpcTensor(
            handle_hex=self.ipc_handle_hex,
            offset=0,
            dtype=dtype_info(self.spec.dtype).code,
            shape=self.spec.shape,
            strides=self.spec.strides,
        )


@dataclass
class SharedSet:
    """One complete argument bundle for kb_forward: inputs, params and outputs."""

    inputs: list[SharedBuffer]
    params: list[SharedBuffer]
    outputs: list[SharedBuffer]

    def ipc(self) -> TensorSet:
        return TensorSet(
            inputs=[b.ipc() for b in self.inputs],
            params=[b.ipc() for b in self.params],
            outputs=[b.ipc() for b in self.outputs],
        )

    def fill(self, tensor_args: list[torch.Tensor], params: list[torch.Tensor]) -> None:
        for buffer, value in zip(self.inputs, tensor_args, strict=True):
            buffer.tensor.copy_(value)
        for buffer, value in zip(self.params, params, strict=True):
            buffer.tensor.copy_(value)

    def poison_outputs(self, byte: int) -> None:
        for buffer in self.outputs:
            buffer.raw.fill_(byte)


class SharedMemoryPool:
    """Allocates shared sets on one device and frees them all on close."""

    def __init__(self, device: int) -> None:
        self.device = device
        torch.cuda.set_device(device)
        torch.empty(1, device=f"cuda:{device}")  # makes the primary context current for the driver API calls
        torch.cuda.empty_cache()  # blocks PyTorch caches but does not use cannot hold shared buffers
        self._cuda = _libcuda()
        self._pointers: list[int] = []

    def allocate_set(self, spec: ProblemSpec) -> SharedSet:
        return SharedSet(
            inputs=[self._allocate(t) for t in spec.inputs],
            params=[self._allocate(t) for t in spec.params],
            outputs=[self._allocate(t) for t in spec.outputs],
        )

    def _allocate(self, spec: TensorSpec) -> SharedBuffer:
        nbytes = math.prod(spec.shape) * dtype_info(spec.dtype).itemsize
        pointer = ctypes.c_uint64()
        _check(self._cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, _MIN_ALLOCATION))),
               f"cuMemAlloc of {nbytes} bytes for '{spec.name}'")
        self._pointers.append(pointer.value)
        handle = (ctypes.c_ubyte * _IPC_HANDLE_BYTES)()
        _check(self._cuda.cuIpcGetMemHandle(handle, ctypes.c_uint64(pointer.value)), "cuIpcGetMemHandle")
        raw = torch.as_tensor(_ByteView(pointer.value, nbytes), device=f"cuda:{self.device}")
        tensor = raw.view(dtype_info(spec.dtype).torch_dtype).view(spec.shape)
        return SharedBuffer(spec, pointer.value, nbytes, raw, tensor, bytes(handle).hex())

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
        for pointer in self._pointers:
            self._cuda.cuMemFree_v2(ctypes.c_uint64(pointer))
        self._pointers.clear()

    def __enter__(self) -> SharedMemoryPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
