"""Reads our checkpoint format (core/train/formats/checkpoint.h, versions 1 to 3)
with the Python standard library alone: the header's key/value pairs, the
vocabulary, the parameters and, for a training checkpoint, the Adam moments.
Shared by the PyTorch peer (bench/peers/torch_gpt2.py) and the tests.

Version 2 names every setting in its header ("model.n_embd" = "384"), so this
reader parses names, not offsets; version 1 kept the model sizes at fixed
offsets, which are read here once and returned under the same names."""
import struct

MAGIC = b"GPT2CKPT"


def fnv1a64(data):
    """FNV-1a 64 of bytes, as an int: the checksum a checkpoint ends with
    (over everything before it) and the engine's other content hashes."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


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
        """The model as {"V", "T", "L", "NH", "C"} and the architecture
        variant under the exporter's manifest names (VARIANT_KEYS), resolved
        by resolve_variant: a key the header lacks (a checkpoint older than
        the variants) or that says "auto" takes its arch's choice, GPT-2's
        when the arch is absent too."""
        names = {"V": "vocab_size", "T": "block_size", "L": "n_layer", "NH": "n_head", "C": "n_embd"}
        cfg = {k: int(self.header["model." + v]) for k, v in names.items()}
        for key, (header_key, parse) in VARIANT_KEYS.items():
            if "model." + header_key in self.header:
                cfg[key] = parse(self.header["model." + header_key])
        return resolve_variant(cfg)


def _bool(text):
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


# Manifest name -> (checkpoint header key after "model.", parser of its text).
VARIANT_KEYS = {"arch": ("arch", str), "norm": ("norm", str), "norm_position": ("norm_position", str),
                "position": ("position", str), "rope_theta": ("rope_theta", float),
                "activation": ("activation", str), "mlp": ("mlp", str), "H": ("mlp_hidden", int),
                "KVH": ("n_kv_head", int), "tie": ("tie_embeddings", _bool)}

# The choices of each arch preset (core/model/config.cpp), the value of a
# component key that is absent or "auto". norm_position is pre for both;
# activation is silu under llama or with SwiGLU, else gelu.
ARCH_DEFAULTS = {"gpt2": {"norm": "layernorm", "position": "learned", "mlp": "standard"},
                 "llama": {"norm": "rmsnorm", "position": "rope", "mlp": "swiglu"}}


def resolve_variant(cfg):
    """A copy of cfg (V T L NH C and any variant keys) with every variant key
    present and resolved as our engine resolves it (Gpt2Config::resolved):
    arch absent is gpt2; norm, position, mlp absent or "auto" are the arch's
    (ARCH_DEFAULTS); norm_position is pre; activation is silu under llama or
    with SwiGLU, else gelu; rope_theta 10000; H (MLP hidden width) absent or 0
    is 4C for the standard MLP and ceil(C/6)*16 for SwiGLU; KVH (key and value
    heads) absent or 0 is NH; tie false. Raises ValueError on a value our
    engine refuses."""
    out = dict(cfg)
    out.setdefault("arch", "gpt2")
    if out["arch"] not in ARCH_DEFAULTS:
        raise ValueError(f"model arch {out['arch']!r}: not one of {', '.join(ARCH_DEFAULTS)}")
    auto = lambda key: out.get(key, "auto") == "auto"
    for key, value in ARCH_DEFAULTS[out["arch"]].items():
        if auto(key):
            out[key] = value
    if auto("norm_position"):
        out["norm_position"] = "pre"
    if auto("activation"):
        out["activation"] = "silu" if out["arch"] == "llama" or out["mlp"] == "swiglu" else "gelu"
    out.setdefault("rope_theta", 10000.0)
    out.setdefault("tie", False)
    C, NH = out["C"], out["NH"]
    if not out.get("H"):
        out["H"] = 4 * C if out["mlp"] == "standard" else (C + 5) // 6 * 16
    if not out.get("KVH"):
        out["KVH"] = NH
    allowed = {"norm": ("layernorm", "rmsnorm"), "norm_position": ("pre", "post"), "position": ("learned", "rope"),
               "activation": ("gelu", "relu", "silu"), "mlp": ("standard", "swiglu")}
    for key, values in allowed.items():
        if out[key] not in values:
            raise ValueError(f"model {key} {out[key]!r}: not one of {', '.join(values)}, auto")
    if NH % out["KVH"] != 0:
        raise ValueError(f"model KVH {out['KVH']} does not divide NH {NH}")
    if out["mlp"] == "swiglu" and out["activation"] != "silu":
        raise ValueError(f"model activation {out['activation']!r} with SwiGLU, which gates with silu")
    return out


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
    """(Checkpoint.config(), raw little-endian float32 bytes of the parameters)."""
    ck = load(path)
    return ck.config(), ck.params


def read_params(path):
    """The parameters of a checkpoint as a tuple of floats, in layout order."""
    _, raw = read_checkpoint(path)
    return struct.unpack(f"<{len(raw) // 4}f", raw)
