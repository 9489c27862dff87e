#!/usr/bin/env bash
# Remakes the committed seed corpora in Fuzz/corpus/NAME from real producers: `earmark signature` and
# `earmark catalog add/export` on the test audio (tools/test-audio.sh), sox and ffmpeg for WAV streams
# (files and pipes), tools/fuzz-model-seeds.py for tiny models in the real .emodel format. Run by hand
# when a format changes (tools/fuzz.sh does not run it; it only adds the local YAMNet header at fuzz time).
#
# Usage: Fuzz/make-seeds.sh [--earmark PATH]   (default: a debug build at .build/debug/earmark)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
earmark=$repo/.build/debug/earmark
[ "${1:-}" = --earmark ] && earmark=$2
[ -x "$earmark" ] || { echo "make-seeds.sh: no earmark at $earmark (swift build first)" >&2; exit 1; }
audio=$(bash "$repo/tools/test-audio.sh")
corpus=$here/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- signature: real .earsig files of short clips (a silent one does not validate for matching)
d=$corpus/signature; rm -rf "$d"; mkdir -p "$d"
sox "$audio/reference/pingus-3.ogg" -r 44100 -c 1 "$tmp/clip3.wav" trim 20 3
sox "$audio/reference/sorcerer.flac" -r 44100 -c 1 "$tmp/clip1.wav" trim 30 1.2
sox -n -r 44100 -c 1 "$tmp/silence.wav" trim 0 1
"$earmark" signature "$tmp/clip3.wav" -o "$d/pingus-3s.earsig" >/dev/null
"$earmark" signature "$tmp/clip1.wav" -o "$d/sorcerer-1.2s.earsig" >/dev/null
"$earmark" signature "$tmp/silence.wav" -o "$d/silence-1s.earsig" >/dev/null

# --- catalog: a real export of a catalog with two short tracks, rewritten with 512-byte pages
d=$corpus/catalog; rm -rf "$d"; mkdir -p "$d"
sox "$audio/reference/pingus-4.flac" -r 44100 -c 1 "$tmp/t1.wav" trim 10 2
sox "$audio/reference/goin_march.ogg" -r 44100 -c 1 "$tmp/t2.wav" trim 10 1.5
export EARMARK_CATALOG=$tmp/cat.earcat
"$earmark" catalog add "$tmp/t1.wav" "$tmp/t2.wav" >/dev/null
"$earmark" catalog export "$tmp/export.earcat" >/dev/null
sqlite3 "$tmp/export.earcat" "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;" >/dev/null
cp "$tmp/export.earcat" "$d/two-tracks-512.earcat"
rm -rf "$EARMARK_CATALOG"*
"$earmark" catalog add "$tmp/t2.wav" >/dev/null
"$earmark" catalog export "$tmp/one.earcat" >/dev/null        # one track, its landmarks pending
"$earmark" catalog remove 1 >/dev/null                       # no track left
"$earmark" catalog export "$tmp/empty.earcat" >/dev/null
for name in one empty; do
  sqlite3 "$tmp/$name.earcat" "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;" >/dev/null
done
cp "$tmp/one.earcat" "$d/one-track-512.earcat"
cp "$tmp/empty.earcat" "$d/empty-512.earcat"
unset EARMARK_CATALOG

# --- wav: headers and a few samples as sox and ffmpeg write them, to files and to pipes
d=$corpus/wav; rm -rf "$d"; mkdir -p "$d"
sox -n -r 44100 -c 2 -b 16 "$tmp/tone.wav" synth 0.01 sine 440
sox "$tmp/tone.wav" "$d/sox-file-s16-stereo.wav"
sox "$tmp/tone.wav" -t raw - | sox -t raw -r 44100 -c 2 -b 16 -e signed - -t wav - 2>/dev/null | cat >"$d/sox-pipe-s16-stereo.wav"
sox "$tmp/tone.wav" -b 24 "$d/sox-file-s24-extensible.wav"
sox "$tmp/tone.wav" -b 32 -e floating-point "$d/sox-file-f32-fact.wav"
sox "$tmp/tone.wav" -t raw - | sox -t raw -r 44100 -c 2 -b 16 -e signed - -b 32 -e floating-point -t wav - \
  2>/dev/null | cat >"$d/sox-pipe-f32-extensible.wav"
ffmpeg -v error -i "$tmp/tone.wav" -f wav - | cat >"$d/ffmpeg-pipe-s16-list.wav"
ffmpeg -v error -i "$tmp/tone.wav" -ac 1 -c:a pcm_s32le -f wav - | cat >"$d/ffmpeg-pipe-s32-mono.wav"
ffmpeg -v error -i "$tmp/tone.wav" -rf64 always -f wav - | cat >"$d/ffmpeg-pipe-rf64.wav"
ffmpeg -v error -i "$tmp/tone.wav" -rf64 always "$d/ffmpeg-file-rf64.wav"
ffmpeg -v error -i "$tmp/tone.wav" -metadata title=x -c:a pcm_f32le "$d/ffmpeg-file-f32-list.wav"

# --- csv: metadata files as the README describes them
d=$corpus/csv; rm -rf "$d"; mkdir -p "$d"
printf 'path,title,artist,album,isrc\nsong1.flac,"Hello, World",The Band,First,GBXXX0000001\n' >"$d/readme-example.csv"
printf '\xef\xbb\xbfFile,Title,Artist\r\n"a ""quoted"" name.wav",Line one\r\n"two\r\nlines",x,y\r\n\r\nc.ogg,,\r\n' >"$d/bom-crlf-quotes.csv"
printf 'title,path,album\n,~/music/a.flac,\nt,sub/../b.flac,"A, B"\nu,/abs/c.mp3\n' >"$d/relative-absolute.csv"
printf 'path\n' >"$d/header-only.csv"

# --- postgres-url: a URL line, NAME=VALUE environment lines, then after a -- line a password file (Fuzz/README.md)
d=$corpus/postgres-url; rm -rf "$d"; mkdir -p "$d"
printf 'postgres://earmark:s3cr%%40t@db.example:6543/music?sslmode=require&connect_timeout=5\n' >"$d/full.txt"
printf 'postgresql://me@/cat?host=/tmp/pg&port=5999&application_name=x\nPGUSER=alice\n--\n/tmp/pg:5999:*:*:socketpass\n' >"$d/socket-pgpass.txt"
printf 'postgres://me@[::1]:5433/cat?password=hidden\n' >"$d/ipv6-password-parameter.txt"
printf 'postgres://\nPGHOST=db.example\nPGPORT=7000\nPGDATABASE=music\nPGSSLMODE=verify-full\n--\n# comment\ndb.example:7000:music:*:pa\\:ss\n*:*:*:*:fallback\n' >"$d/environment-pgpass.txt"
printf 'postgres://u@%%2Fvar%%2Frun%%2Fpostgresql/db?dbname=other&user=bob\n' >"$d/escaped-socket.txt"

# --- model: tiny networks in the .emodel format (the real YAMNet model is 3.8 MB and not ours to ship)
d=$corpus/model; rm -rf "$d"; mkdir -p "$d"
python3 "$repo/tools/fuzz-model-seeds.py" "$d"

# --- speech-model: tiny Whisper-shaped models in the speech .emodel format (docs/speech.md)
d=$corpus/speech-model; rm -rf "$d"; mkdir -p "$d"
python3 "$repo/tools/fuzz-speech-model-seeds.py" "$d"

du -sh "$corpus"/*
