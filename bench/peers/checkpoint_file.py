"""Reads our checkpoint format (core/train/checkpoint.h, versions 1 to 3)
with the Python standard library alone: the header's key/value pairs, the
vocabulary, the parameters and, for a training checkpoint, the Adam moments.
Shared by the PyTorch peer (bench/peers/torch_gpt2.py) and the tests.

Version 2 names every setting in its header ("model.n_embd" = "384"), so this
reader parses names, not offsets; version 1 kept the model sizes at fixed
offsets, which are read here once and returned under the same names."""
import struct

MAGIC = b"GPT2CKPT"


class Checkpoint:
    """version, header (dict of str), vocab (list of bytes), and the float32
    arrays as raw little-endian bytes: params, m and v (None for a model
    checkpoint)."""

    def __init__(self):
        self.version = 0
        self.header = {}
        self.vocab = []
        self.params = b""
        self.m = None
        self.v = None

    def config(self):
        """The model sizes as {"V", "T", "L", "NH", "C"}."""
        names = {"V": "vocab_size", "T": "block_size", "L": "n_layer", "NH": "n_head", "C": "n_embd"}
        return {k: int(self.header["model." + v]) for k, v in names.items()}


class _Reader:
    def __init__(self, b, pos, end, path):
        self.b, self.pos, self.end, self.path = b, pos, end, path

    def take(self, fmt):
        n = struct.calcsize(fmt)
        if self.pos + n > self.end:
            raise ValueError(f"{self.path}: truncated checkpoint")
        out = struct.unpack_from(fmt, self.b, self.pos)
        self.pos += n
        return out if len(out) > 1 else out[0]

    def raw(self, n):
        if self.pos + n > self.end:
            raise ValueError(f"{self.path}: truncated checkpoint")
        out = self.b[self.pos: self.pos + n]
        self.pos += n
        return out

    def text(self):
        return self.raw(self.take("<I"))


def load(path):
    with open(path, "rb") as f:
        b = f.read()
    if b[:8] != MAGIC:
        raise ValueError(f"{path}: not a checkpoint (no GPT2CKPT magic)")
    if len(b) < 24:
        raise ValueError(f"{path}: truncated checkpoint: {len(b)} bytes, shorter than its header")
    version, flags = struct.unpack_from("<II", b, 8)
    ck = Checkpoint()
    ck.version = version
    end = len(b) - 8  # the checksum
    if version == 1:
        r = _Reader(b, 16, end, path)
        sizes = r.take("<5i")
        ck.header = dict(zip(["model.vocab_size", "model.block_size", "model.n_layer", "model.n_head",
                              "model.n_embd"], map(str, sizes)))
        ck.header["data.tokenizer"] = ["word", "char"][r.take("<B")]
    elif version in (2, 3):  # 3 adds the "run.id" header entry, same layout
        (size,) = struct.unpack_from("<Q", b, 16)
        if len(b) != size or size < 32:
            raise ValueError(f"{path}: truncated or corrupted checkpoint: {len(b)} bytes, it records {size}")
        r = _Reader(b, 24, end, path)
        for _ in range(r.take("<I")):
            key = r.text().decode()
            ck.header[key] = r.text().decode()
    else:
        raise ValueError(f"{path}: checkpoint format version {version}, this reader knows 1 to 3")
    ck.vocab = [r.text() for _ in range(r.take("<I"))]
    n = r.take("<Q")
    ck.params = r.raw(4 * n)
    if flags & 1:
        if version == 1:  # the training state's fixed fields: kind, 2 f32, 2 i64, 5 f32, 3 i64, u64
            r.raw(4 + 8 + 16 + 20 + 24 + 8)
        ck.m = r.raw(4 * n)
        ck.v = r.raw(4 * n)
    if r.pos != end:
        raise ValueError(f"{path}: corrupted checkpoint: {end - r.pos} unexpected bytes")
    return ck


def read_checkpoint(path):
    """({"V", "T", "L", "NH", "C"}, raw little-endian float32 bytes of the parameters)."""
    ck = load(path)
    return ck.config(), ck.params


def read_params(path):
    """The parameters of a checkpoint as a tuple of floats, in layout order."""
    _, raw = read_checkpoint(path)
    return struct.unpack(f"<{len(raw) // 4}f", raw)
