#!/usr/bin/env python3
"""Helper of tools/speech-eval.sh: builds the speech evaluation sets and scores transcripts.

  speech_eval.py build ROOT OUT COUNT   ROOT: the Debian packages unpacked (dpkg-deb -x); OUT: the sets
  speech_eval.py score SET RESULTS BEAM [ANCHOR]
                                        RESULTS: earmark-speech-bench --json output, ANCHOR: speech_anchor.py's on
                                        the same files; prints a Markdown table row (WER and × real time of both)
                                        and adds the figures to summary.jsonl beside RESULTS
  speech_eval.py compare SET RESULTS ANCHOR [N]
                                        the N prompts (20) where the two transcripts differ, most extra errors first

Sets (each a folder with files.txt, the audio files in order, and references.json, {file: text}):
  en-isolated  COUNT English prompts (16-kHz G.722 from asterisk-core-sounds-en-g722), sampled with a fixed seed
  en-long      the same prompts joined into one file with 0.6 s of silence between them
  en-8k        the same prompts from asterisk-core-sounds-en-wav (8-kHz WAV)
  fr, es       COUNT prompts each from asterisk-core-sounds-fr-g722 / -es-g722
References are the transcripts the packages ship (core-sounds-LANG.txt). Prompts whose transcript
contains a bracketed description ([ascending tones]), '*' or '#' (read aloud as star/pound, étoile/dièse, …)
are left out of the sample, and so are the silence/ files (their "transcripts" say how long the silence is).

WER normalisation, the same for reference and hypothesis: Unicode NFKD with the combining marks dropped
(the Spanish transcripts are written without accents: numero, telefono, grabacion), lower case; apostrophes kept
inside words, digit groups joined (1,000 → 1000), every other character that is not a letter or digit
becomes a space; spelled-out numbers
(0–20, the tens, hundreds and thousand in each language; "and", "et", "y" between number words dropped)
become digits, adjacent ones combined (twenty-one → 21, two hundred and five → 205, soixante-dix-sept → 77,
quatre-vingt-dix → 90), so "press 1" and "press one" are the same words; English ordinals likewise
(twelfth → 12th, twenty-first → 21st).
WER = (substitutions + deletions + insertions) / reference words, summed over the set.
"""
import json
import os
import random
import re
import subprocess
import sys
import unicodedata
import wave

SEED = 20  # issue 20
RATE = 16000
GAP = 0.6

LANGS = {"en": "en_US_f_Allison", "fr": "fr_CA_f_June", "es": "es_MX_f_Allison"}

NUMBERS = {
    "en": {w: i for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split())}
    | {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
       "hundred": 100, "thousand": 1000, "oh": None},
    "fr": {w: i for i, w in enumerate(
        "zero un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze seize dix-sept "
        "dix-huit dix-neuf vingt".split())}
    | {"une": 1, "vingts": 20, "cents": 100, "trente": 30, "quarante": 40, "cinquante": 50, "soixante": 60, "cent": 100, "mille": 1000},
    "es": {w: i for i, w in enumerate(
        "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince dieciseis "
        "diecisiete dieciocho diecinueve veinte".split())}
    | {"una": 1, "treinta": 30, "cuarenta": 40, "cincuenta": 50, "sesenta": 60, "setenta": 70, "ochenta": 80,
       "noventa": 90, "cien": 100, "ciento": 100, "mil": 1000}
    | {w: 21 + i for i, w in enumerate("veintiuno veintidos veintitres veinticuatro veinticinco veintiseis veintisiete "
                                       "veintiocho veintinueve".split())}
    | {w: 200 + 100 * i for i, w in enumerate("doscientos trescientos cuatrocientos quinientos seiscientos setecientos "
                                               "ochocientos novecientos".split())},
}
NUMBERS["en"].pop("oh")
ORDINALS = {"en": {w: i + 1 for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split())}
    | {"thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60, "seventieth": 70, "eightieth": 80,
       "ninetieth": 90, "hundredth": 100}, "fr": {}, "es": {}}


def ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


JOINERS = {"en": {"and"}, "fr": {"et"}, "es": {"y"}}


def words(text, lang):
    text = unicodedata.normalize("NFKD", text).lower().replace("’", "'")
    text = "".join(c for c in text if not unicodedata.combining(c))  # accents dropped: -es writes numero, telefono
    text = re.sub(r"(?<=\d)[,.](?=\d{3}(?!\d))", "", text)  # 1,000 → 1000
    chars = []
    for i, c in enumerate(text):
        if c.isalnum():
            chars.append(c)
        elif c == "'" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            chars.append(c)
        elif c in ",.;:!?…":
            chars.append(" | ")  # ends a run of number words, then dropped
        else:
            chars.append(" ")
    tokens = "".join(chars).split()
    table, joiners, ordinals = NUMBERS[lang], JOINERS[lang], ORDINALS[lang]
    out, i = [], 0
    while i < len(tokens):
        if tokens[i] in ordinals:
            out.append(ordinal(ordinals[tokens[i]]))
            i += 1
            continue
        if tokens[i] not in table:
            if tokens[i] != "|":
                out.append(tokens[i])
            i += 1
            continue
        total, current, started = 0, 0, False
        while i < len(tokens):
            t = tokens[i]
            if t in joiners and started and i + 1 < len(tokens) and tokens[i + 1] in table:
                i += 1
                continue
            if t in ordinals and started and current % 10 == 0 and current % 100 >= 20 and ordinals[t] < 10:
                current += ordinals[t]  # twenty-first → 21st
                i += 1
                out.append(ordinal(total + current))
                total = current = 0
                started = None
                break
            if t not in table:
                break
            v = table[t]
            i += 1
            if not started:
                total, current, started = (v, 0, True) if v == 1000 else (0, v, True)
            elif v == 100 and 0 < current < 100:
                current *= 100
            elif v == 1000 and 0 < total + current < 1000:
                total, current = (total + current) * 1000, 0
            elif v < 1000 and v != 100 and (current == 0 and total > 0 or current % 100 == 0 and current > 0 and v < 100):
                current += v
            elif v < 10 and current % 10 == 0 and current % 100 >= 20:
                current += v
            elif lang == "fr" and (v < 10 and current % 100 == 10 or 10 <= v < 20 and current % 100 in (60, 80)):
                current += v
            elif lang == "fr" and v == 20 and current % 100 == 4:
                current += 76
            else:
                out.append(str(total + current))
                total, current = (v, 0) if v == 1000 else (0, v)
        if started is not None:
            out.append(str(total + current))
    return out


def distance(ref, hyp):
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def transcripts(root, lang):
    path = os.path.join(root, f"usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz")
    out = {}
    for line in subprocess.run(["zcat", path], capture_output=True, check=True, text=True).stdout.splitlines():
        if line.startswith(";") or ": " not in line:
            continue
        name, text = line.split(": ", 1)
        text = text.strip().strip('"').strip()
        if text and not any(c in text for c in "[]*#") and not name.startswith("silence/"):
            out[name.strip()] = text
    return out


def to_wav(source, target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    args = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    if source.endswith(".g722"):
        args += ["-f", "g722"]
    subprocess.run(args + ["-i", source, "-ac", "1", "-ar", str(RATE), "-c:a", "pcm_s16le", target], check=True)


def write_set(out, name, lang, items):
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "files.txt"), "w") as f:
        f.write("".join(path + "\n" for path, _ in items))
    with open(os.path.join(folder, "references.json"), "w") as f:
        json.dump({"language": lang, "references": {path: text for path, text in items}}, f, ensure_ascii=False, indent=0)


def build(root, out, count):
    sounds = os.path.join(root, "usr/share/asterisk/sounds")
    for lang, voice in LANGS.items():
        texts = transcripts(root, lang)
        folder = os.path.join(sounds, voice)
        names = sorted(n for n in texts if os.path.exists(os.path.join(folder, n + ".g722"))
                       and (lang != "en" or os.path.exists(os.path.join(folder, n + ".wav"))))
        sample = sorted(random.Random(SEED).sample(names, min(count, len(names))))
        items = []
        for n in sample:
            target = os.path.join(out, "audio", lang, n + ".wav")
            if not os.path.exists(target):
                to_wav(os.path.join(folder, n + ".g722"), target)
            items.append((target, texts[n]))
        write_set(out, "en-isolated" if lang == "en" else lang, lang, items)
        if lang != "en":
            continue
        write_set(out, "en-8k", lang, [(os.path.join(folder, n + ".wav"), texts[n]) for n in sample])
        # One long file: the prompts in the sample's order, 0.6 s of silence between them.
        long_path = os.path.join(out, "audio", "en-long.wav")
        gap = b"\0\0" * int(GAP * RATE)
        with wave.open(long_path, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            for i, (path, _) in enumerate(items):
                with wave.open(path, "rb") as r:
                    w.writeframes((gap if i else b"") + r.readframes(r.getnframes()))
        # Joined with a full stop so that numbers of neighbouring prompts stay apart ("fifty. seven").
        write_set(out, "en-long", lang, [(long_path, " ".join(text.rstrip(".") + "." for _, text in items))])


def read_results(results):
    """earmark-speech-bench --json (or speech_anchor.py) output: ({file: text}, audio seconds, processing seconds)."""
    texts, audio, seconds = {}, 0.0, 0.0
    for line in open(results):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "file" not in r:
            audio, seconds = r["audio"], r["seconds"]
        else:
            texts[r["file"]] = r["text"]
    return texts, audio, seconds


def tally(lang, refs, texts):
    errors = total = 0
    for f, text in texts.items():
        ref = words(refs[f], lang)
        errors += distance(ref, words(text, lang))
        total += len(ref)
    return errors, total


def score(set_dir, results, beam, anchor=None):
    meta = json.load(open(os.path.join(set_dir, "references.json")))
    lang, refs = meta["language"], meta["references"]
    texts, audio, seconds = read_results(results)
    errors, total = tally(lang, refs, texts)
    name = os.path.basename(set_dir.rstrip("/"))
    summary = {"set": name, "beam": beam, "files": len(texts), "words": total, "errors": errors,
               "wer": 100.0 * errors / max(1, total), "audio": audio, "seconds": seconds,
               "realtime": audio / seconds if seconds else 0}
    row = f"{summary['wer']:.1f} % | {summary['realtime']:.1f}"
    if anchor:
        a_texts, a_audio, a_seconds = read_results(anchor)
        a_errors, a_total = tally(lang, refs, a_texts)
        summary |= {"anchorWer": 100.0 * a_errors / max(1, a_total), "anchorErrors": a_errors, "anchorFiles": len(a_texts),
                    "anchorRealtime": a_audio / a_seconds if a_seconds else 0}
        row = (f"{summary['wer']:.1f} % | {summary['anchorWer']:.1f} % | {summary['realtime']:.1f} | "
               f"{summary['anchorRealtime']:.1f}")
    with open(os.path.join(os.path.dirname(results), "summary.jsonl"), "a") as f:
        f.write(json.dumps(summary) + "\n")
    prompts = f"1 file, {audio:.0f} s" if name == "en-long" else f"{len(texts)}, {audio:.0f} s"
    print(f"| {name} | {prompts} | {total} | {beam} | {row} |")


def compare(set_dir, results, anchor, limit=20):
    """The prompts where Earmark and the anchor differ, most extra errors first, with both texts normalised."""
    meta = json.load(open(os.path.join(set_dir, "references.json")))
    lang, refs = meta["language"], meta["references"]
    ours, _, _ = read_results(results)
    theirs, _, _ = read_results(anchor)
    rows = []
    for f in ours.keys() & theirs.keys():
        ref, a, b = words(refs[f], lang), words(ours[f], lang), words(theirs[f], lang)
        if a != b:
            rows.append((distance(ref, a) - distance(ref, b), f, ref, a, b, ours[f], theirs[f]))
    rows.sort(key=lambda r: -r[0])
    print(f"{len(rows)} of {len(ours)} prompts differ; extra errors: {sum(r[0] for r in rows)}")
    for extra, f, ref, a, b, ra, rb in rows[:limit]:
        print(f"\n{extra:+d} {os.path.basename(f)}\n  ref:     {' '.join(ref)}\n  earmark: {ra}\n  anchor:  {rb}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) == 6 else None)
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) == 6 else 20)
    elif len(sys.argv) == 3 and sys.argv[1] == "words":
        print(" ".join(words(sys.stdin.read(), sys.argv[2])))
    else:
        sys.exit(__doc__)
