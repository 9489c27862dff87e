#!/usr/bin/env python3
"""Reference Whisper results for Earmark's speech tests: numpy log-mel, CTranslate2 encoder and greedy tokens.

    whisper_reference.py [--source DIR] [--language CODE|auto] SAMPLES.f32... OUTDIR

Each SAMPLES.f32 holds mono 16-kHz audio as raw little-endian float32 (the Swift test writes what its
own decoder and resampler made, so both sides start from the same samples). OUTDIR/NAME/ (NAME: the
file's name without .f32) gets:

    mel.f32        3000 x 80 float32, row = frame: the first 30-s window of Whisper's log-mel spectrogram,
                   computed here in float64 with numpy as Whisper's transcribe does (audio followed by 30 s of
                   zeros; periodic Hann 400, hop 160, reflect-padded centred frames, |rfft|^2, 80
                   Slaney-normalised Slaney-scale mel filters up to 8 kHz, log10 floored at 1e-10, clamped to
                   max - 8, (x + 4) / 4), frames past the audio's samples/160 set to 0 (Whisper's padding)
    encoder.f32    1500 x 512 float32: CTranslate2's encoder output for mel.f32
    result.json    {"language", "languageProbability", "tokens", "noSpeechProbability"}: CTranslate2's
                   language detection (or the given language) and its greedy tokens (beam 1) after the
                   prompt <|startoftranscript|><|lang|><|transcribe|>, with timestamps, default suppressions

CTranslate2 runs the model.bin of tools/fetch-speech-model.sh (DIR, default
$EARMARK_MODEL_CACHE/whisper-base-1.0.0/source) on the CPU with compute type float32 and one thread.
Run it with the Python that `tools/fetch-speech-model.sh --with-ctranslate2 --print-python` prints.
"""
import argparse
import json
import os
import sys

import numpy as np

SAMPLE_RATE, N_FFT, HOP, N_MELS, CHUNK_FRAMES = 16000, 400, 160, 80, 3000


def default_source():
    cache = os.environ.get("EARMARK_MODEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "earmark-models")
    return os.path.join(cache, "whisper-base-1.0.0", "source")


def mel_filters():
    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        linear = f / (200.0 / 3)
        log_part = 15.0 + np.log(np.maximum(f, 1e-12) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(f >= 1000.0, log_part, linear)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))

    bins = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE / 2), N_MELS + 2))
    widths = np.diff(edges)
    fb = np.zeros((N_MELS, len(bins)))
    for m in range(N_MELS):
        rising = (bins - edges[m]) / widths[m]
        falling = (edges[m + 2] - bins) / widths[m + 1]
        fb[m] = np.maximum(0, np.minimum(rising, falling)) * (2.0 / (edges[m + 2] - edges[m]))
    return fb


def log_mel(samples):
    audio = np.concatenate([samples.astype(np.float64), np.zeros(SAMPLE_RATE * 30)])
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    frames = len(audio) // HOP
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    index = np.arange(N_FFT)[None, :] + HOP * np.arange(frames)[:, None]
    power = np.abs(np.fft.rfft(padded[index] * window, axis=1)) ** 2
    mel = mel_filters() @ power.T
    spec = np.log10(np.maximum(mel, 1e-10))
    spec = np.maximum(spec, spec.max() - 8.0)
    spec = (spec + 4.0) / 4.0
    content = len(samples) // HOP
    window = np.zeros((N_MELS, CHUNK_FRAMES))
    window[:, :min(content, CHUNK_FRAMES)] = spec[:, :min(content, CHUNK_FRAMES)]
    return window


def main(argv=None):
    p = argparse.ArgumentParser(prog="whisper_reference.py", description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", metavar="SAMPLES.f32... OUTDIR")
    p.add_argument("--source", default=default_source())
    p.add_argument("--language", default="auto")
    a = p.parse_args(argv)
    if len(a.paths) < 2:
        p.error("expected SAMPLES.f32... OUTDIR")
    import ctranslate2

    model = ctranslate2.models.Whisper(a.source, device="cpu", compute_type="float32", intra_threads=1, inter_threads=1)
    with open(os.path.join(a.source, "vocabulary.txt"), encoding="utf-8") as f:
        vocab = f.read().split("\n")
    for path in a.paths[:-1]:
        name = os.path.basename(path)
        name = name[:-4] if name.endswith(".f32") else name
        run(model, vocab, np.fromfile(path, dtype="<f4"), os.path.join(a.paths[-1], name), a.language)
    return 0


def run(model, vocab, samples, outdir, language):
    import ctranslate2

    mel = log_mel(samples).astype(np.float32)
    os.makedirs(outdir, exist_ok=True)
    np.ascontiguousarray(mel.T).astype("<f4").tofile(os.path.join(outdir, "mel.f32"))
    features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))
    encoded = np.array(model.encode(features, to_cpu=True))
    encoded[0].astype("<f4").tofile(os.path.join(outdir, "encoder.f32"))
    if language == "auto":
        ranked = model.detect_language(features)[0]
        language, probability = ranked[0][0][2:-2], float(ranked[0][1])
    else:
        probability = 1.0
    prompt = [vocab.index("<|startoftranscript|>"), vocab.index(f"<|{language}|>"), vocab.index("<|transcribe|>")]
    result = model.generate(features, [prompt], beam_size=1, return_no_speech_prob=True, max_length=448,
                            suppress_blank=True, suppress_tokens=[-1], max_initial_timestamp_index=50)[0]
    with open(os.path.join(outdir, "result.json"), "w") as f:
        json.dump({"language": language, "languageProbability": probability,
                   "tokens": [int(t) for t in result.sequences_ids[0]],
                   "noSpeechProbability": float(result.no_speech_prob)}, f)


if __name__ == "__main__":
    sys.exit(main())
