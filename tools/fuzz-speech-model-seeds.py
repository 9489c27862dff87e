#!/usr/bin/env python3
"""Writes tiny Whisper-shaped speech models in Earmark's speech .emodel format (docs/speech.md) into the
folder given: seeds for the fuzz-speech-model target. Two are valid (8 wide, 1 or 2 layers, 1-s windows,
4 mel bands, 300 tokens: 256 single bytes, 10 special, 34 times; deterministic weights), one is a valid
header whose blob is cut off. Usage: tools/fuzz-speech-model-seeds.py FOLDER"""
import json
import os
import struct
import sys


def byte_characters():
    """GPT-2's byte-level alphabet: byte -> the character that stands for it."""
    table, extra = {}, 256
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
            table[b] = chr(b)
        else:
            table[b] = chr(extra)
            extra += 1
    return table


def checksum(blob):
    s1 = s2 = 0
    for i in range(len(blob) // 8):
        w = struct.unpack_from("<Q", blob, 8 * i)[0]
        s1 = (s1 + w) & 0xFFFFFFFFFFFFFFFF
        s2 = (s2 + (i + 1) * w) & 0xFFFFFFFFFFFFFFFF
    return f"{s1:016x}:{s2:016x}"


def model(layers, heads, seed):
    d, mels, vocab, text_ctx, ctx = 8, 4, 300, 16, 50
    shapes = {"encoder/conv1/weight": [d, mels, 3], "encoder/conv1/bias": [d], "encoder/conv2/weight": [d, d, 3],
              "encoder/conv2/bias": [d], "encoder/position_encodings/encodings": [ctx, d],
              "encoder/layer_norm/gamma": [d], "encoder/layer_norm/beta": [d], "decoder/embeddings/weight": [vocab, d],
              "decoder/position_encodings/encodings": [text_ctx, d], "decoder/layer_norm/gamma": [d],
              "decoder/layer_norm/beta": [d]}

    def norm(p):
        shapes[p + "/layer_norm/gamma"] = [d]
        shapes[p + "/layer_norm/beta"] = [d]

    def linear(p, r, c):
        shapes[p + "/weight"] = [r, c]
        shapes[p + "/bias"] = [r]

    for i in range(layers):
        for side in ("encoder", "decoder"):
            p = f"{side}/layer_{i}"
            norm(p + "/self_attention")
            linear(p + "/self_attention/linear_0", 3 * d, d)
            linear(p + "/self_attention/linear_1", d, d)
            norm(p + "/ffn")
            linear(p + "/ffn/linear_0", 4 * d, d)
            linear(p + "/ffn/linear_1", d, 4 * d)
        p = f"decoder/layer_{i}/attention"
        norm(p)
        linear(p + "/linear_0", d, d)
        linear(p + "/linear_1", 2 * d, d)
        linear(p + "/linear_2", d, d)
    blob, tensors, state = bytearray(), {}, seed
    for name in sorted(shapes):
        blob += b"\0" * ((-len(blob)) % 64)
        count = 1
        for n in shapes[name]:
            count *= n
        values = []
        for _ in range(count):
            state = (state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
            v = ((state >> 40) - (1 << 23)) / (1 << 23) * 0.5
            values.append(v + 1 if name.endswith("gamma") else v)
        tensors[name] = {"offset": len(blob), "bytes": 2 * count, "shape": shapes[name], "type": "float16"}
        blob += struct.pack("<%de" % count, *values)
    chars = byte_characters()
    tokens = [chars[b] for b in range(256)] + ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>",
                                                 "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                                                 "<|nocaptions|>", "<|notimestamps|>"]
    tokens += ["<|%.2f|>" % (0.02 * i) for i in range(34)]
    text = "\n".join(tokens).encode("utf-8")
    blob += b"\0" * ((-len(blob)) % 64)
    tensors["vocabulary"] = {"offset": len(blob), "bytes": len(text), "shape": [len(text)], "type": "uint8"}
    blob += text
    blob += b"\0" * ((-len(blob)) % 8)
    header = {"name": f"tiny-{layers}", "licence": "test data",
              "architecture": {"melBands": mels, "audioContext": ctx, "audioState": d, "audioHeads": heads,
                               "audioLayers": layers, "vocabularySize": vocab, "textContext": text_ctx, "textState": d,
                               "textHeads": heads, "textLayers": layers},
              "frontEnd": {"sampleRate": 16000, "fftLength": 400, "hopLength": 160, "melBands": mels, "chunkSeconds": 1},
              "special": {"endOfText": 256, "startOfTranscript": 257, "translate": 260, "transcribe": 261,
                          "startOfPrevious": 263, "noSpeech": 264, "noTimestamps": 265, "timestampBegin": 266},
              "languages": [{"code": "en", "token": 258}, {"code": "fr", "token": 259}],
              "suppressTokens": [260, 261, 262, 263, 264], "suppressAtBegin": [32, 256], "alignmentHeads": [[0, 0]],
              "tensors": tensors, "blobBytes": len(blob), "blobChecksum": checksum(blob)}
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    out = bytearray(b"EARWHSPR" + struct.pack("<II", 1, len(head)) + head)
    out += b"\0" * ((-len(out)) % 64)
    return bytes(out), bytes(blob)


def main():
    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    for name, layers, heads in (("tiny-1-layer.emodel", 1, 2), ("tiny-2-layers.emodel", 2, 1)):
        head, blob = model(layers, heads, seed=layers)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(head + blob)
    head, blob = model(1, 2, seed=3)
    with open(os.path.join(folder, "tiny-blob-cut.emodel"), "wb") as f:
        f.write(head + blob[:256])


if __name__ == "__main__":
    main()
