#!/usr/bin/env python3
"""Writes tiny sound models in Earmark's .emodel format (see SoundModel.swift) into the folder given:
seeds for the fuzz-model target. Each is a valid network on a 4 x 4 patch (conv, depthwise, average
pool, dense, and in one a float head), a few hundred bytes, with deterministic weights.
Usage: tools/fuzz-model-seeds.py FOLDER"""
import json
import struct
import sys


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class Blob:
    def __init__(self):
        self.data = bytearray()

    def add(self, kind, values):
        while len(self.data) % 4:
            self.data.append(0)
        offset = len(self.data)
        fmt = {"int8": "b", "int32": "i", "float32": "f"}[kind]
        self.data += struct.pack("<%d%s" % (len(values), fmt), *values)
        return {"offset": offset, "count": len(values), "type": kind}


def model(name, activation, float_head, per_channel):
    blob = Blob()
    labels = 3

    def mult(n):
        return blob.add("float32", [0.01 + 0.001 * i for i in range(n if per_channel else 1)])

    layers = [
        {"op": "conv", "inputChannels": 1, "outputChannels": 2, "kernel": [3, 3], "stride": [1, 1], "pads": [1, 1, 1, 1],
         "weights": blob.add("int8", [(i * 37) % 255 - 127 for i in range(18)]), "bias": blob.add("int32", [100, -100]),
         "multiplier": mult(2), "outputScale": 0.04, "outputZeroPoint": 0},
        {"op": "depthwise", "inputChannels": 2, "outputChannels": 2, "kernel": [3, 3], "stride": [2, 2], "pads": [0, 0, 1, 1],
         "weights": blob.add("int8", [(i * 53) % 255 - 127 for i in range(18)]), "bias": blob.add("int32", [7, -7]),
         "multiplier": mult(2), "outputScale": 0.03, "outputZeroPoint": 0},
        # the pool's multiplier is sIn / (sOut * positions): 2 x 2 positions after the depthwise layer
        {"op": "globalAveragePool", "inputChannels": 2, "outputChannels": 2,
         "multiplier": blob.add("float32", [0.03 / (0.02 * 4)]), "outputScale": 0.02, "outputZeroPoint": 0},
        {"op": "dense", "inputChannels": 2, "outputChannels": labels,
         "weights": blob.add("int8", [5, -9, 12, 100, -128, 127]), "bias": blob.add("int32", [1, 2, 3]),
         "multiplier": mult(labels), "outputScale": 0.5, "outputZeroPoint": 128},
    ]
    if float_head:
        layers.append({"op": "denseFloat", "inputChannels": labels, "outputChannels": 2, "activation": "relu",
                       "weights": blob.add("float32", [0.5, -0.25, 1.0, 2.0, -1.5, 0.125]),
                       "bias": blob.add("float32", [0.0, -0.5])})
        labels = 2
    header = {
        "name": name, "description": "fuzz seed", "source": "tools/fuzz-model-seeds.py", "licence": "CC0",
        "frontEnd": {"sampleRate": 16000, "windowLength": 400, "hopLength": 160, "fftLength": 512, "melBands": 4,
                     "minFrequency": 125.0, "maxFrequency": 7500.0, "logOffset": 0.001, "patchFrames": 4},
        "input": {"scale": 0.05, "zeroPoint": 128},
        "layers": layers, "embeddingLayer": 2, "output": {"activation": activation},
        "labels": [{"mid": "/m/%d" % i, "name": "label %d" % i} for i in range(labels)],
        "blobBytes": len(blob.data), "blobFNV1a64": "%016x" % fnv1a64(blob.data),
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    out = bytearray(b"EARMODEL" + struct.pack("<II", 1, len(text)) + text)
    while len(out) % 16:
        out.append(0)
    return bytes(out + blob.data)


if __name__ == "__main__":
    folder = sys.argv[1]
    for name, activation, head, per_channel in [("tiny-sigmoid", "sigmoid", False, True),
                                                ("tiny-softmax-scalar", "softmax", False, False),
                                                ("tiny-float-head", "none", True, True)]:
        with open("%s/%s.emodel" % (folder, name), "wb") as f:
            f.write(model(name, activation, head, per_channel))
