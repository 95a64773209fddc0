"""torch tensors over memory zoe owns, without a copy: parameters while fetched, gradient buffers
while lent, activations as they come back.

On the host device zoe's device memory is host memory: torch.frombuffer over a ctypes array at the
address gives a CPU tensor sharing it (bf16 and fp16 included). On a CUDA device the address is
device memory: an object with __cuda_array_interface__ describing its bytes goes through
torch.as_tensor and is reinterpreted as the dtype (the interface cannot name bf16).
"""

import ctypes

import torch

# zoe's dtype names for the torch types zoe keeps.
ZOE_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class _CudaArray:
    """The minimum torch.as_tensor needs to wrap device memory."""

    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "strides": None,
            "version": 3,
        }


def over_address(address, shape, dtype, device):
    """A tensor of `shape` and `dtype` on torch device `device` whose memory is zoe's at `address`
    (contiguous, row-major). The caller keeps it only while zoe keeps the memory valid."""
    shape = torch.Size(shape)
    nbytes = shape.numel() * dtype.itemsize
    if device.type == "cpu":
        return torch.frombuffer((ctypes.c_byte * nbytes).from_address(address), dtype=dtype).view(shape)
    return torch.as_tensor(_CudaArray(address, nbytes), device=device).view(dtype).view(shape)


def placeholder(dtype, device):
    """What a parameter's .data is while zoe holds its value: empty, of its dtype and device."""
    return torch.empty(0, dtype=dtype, device=device)
