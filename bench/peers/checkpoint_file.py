"""Reads our checkpoint format (core/checkpoint.h, version 1) with the Python
standard library alone: the model configuration and the parameter block.
Shared by the PyTorch peer (bench/peers/torch_gpt2.py) and the MPI tests."""
import struct


def read_checkpoint(path):
    """({"V", "T", "L", "NH", "C"}, raw little-endian float32 bytes of the parameters)."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:8] != b"GPT2CKPT":
        raise ValueError(f"{path}: not a checkpoint (no GPT2CKPT magic)")
    V, T, L, NH, C = struct.unpack_from("<5i", b, 16)  # after magic, version, flags
    pos = 16 + 20 + 1  # the sizes, then the tokenizer kind byte
    (count,) = struct.unpack_from("<I", b, pos)
    pos += 4
    for _ in range(count):  # vocabulary entries: u32 length + bytes
        (n,) = struct.unpack_from("<I", b, pos)
        pos += 4 + n
    (n,) = struct.unpack_from("<Q", b, pos)
    pos += 8
    if len(b) < pos + 4 * n:
        raise ValueError(f"{path}: truncated checkpoint")
    return {"V": V, "T": T, "L": L, "NH": NH, "C": C}, b[pos: pos + 4 * n]


def read_params(path):
    """The parameters of a checkpoint as a tuple of floats, in layout order."""
    _, raw = read_checkpoint(path)
    return struct.unpack(f"<{len(raw) // 4}f", raw)
