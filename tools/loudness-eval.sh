#!/usr/bin/env bash
# Loudness accuracy against EBU test signals, synthesised with sox from their published definitions:
# EBU Tech 3341 (cases 1–6: integrated loudness of stereo and 5.0 1-kHz sines, with gating) and
# EBU Tech 3342 (cases 1–4: loudness range), and true peak on stereo sines at a quarter, a sixth and
# an eighth of 48 kHz sampled off their crests (the kind of signal Tech 3341's true-peak cases use;
# the expected true peak is the sine's amplitude, up to 3 dB above the samples, once above 0 dBFS).
# Each file goes through `earmark analyze --json`; the measured value must be within ±0.1 LU of the
# expected one (Tech 3342 itself allows ±1 LU for LRA), a true peak within ±0.2 dB.
#
#   tools/loudness-eval.sh        # prints one line per case; exit 1 if any case is out of tolerance
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh </dev/null
swift build -c release --scratch-path .build/tools --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
earmark=$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# tone NAME CHANNELS "SECONDS:dBFS …": 1-kHz sine segments (peak level in dBFS), 48 kHz, 24-bit.
tone() {
  local name=$1 channels=$2 parts=()
  shift 2
  local i=0
  for seg in $1; do
    local secs=${seg%%:*} level=${seg##*:}
    sox -n -r 48000 -b 24 -c "$channels" "$work/$name.$i.wav" synth "$secs" sine 1000 gain "$level"
    parts+=("$work/$name.$i.wav")
    i=$((i + 1))
  done
  if [ ${#parts[@]} -eq 1 ]; then mv "${parts[0]}" "$work/$name.wav"; else sox "${parts[@]}" "$work/$name.wav"; fi
}

tone 3341-1 2 "20:-23"
tone 3341-2 2 "20:-33"
tone 3341-3 2 "10:-36 60:-23 10:-36"
tone 3341-4 2 "10:-72 10:-36 60:-23 10:-36 10:-72"
tone 3341-5 2 "20:-26 20.1:-20 20:-26"
# Case 6, 5.0: L and R at −28 dBFS, C at −24, Ls and Rs at −30.
for ch in L:-28 R:-28 C:-24 Ls:-30 Rs:-30; do tone "3341-6-${ch%%:*}" 1 "20:${ch##*:}"; done
sox -M "$work/3341-6-L.wav" "$work/3341-6-R.wav" "$work/3341-6-C.wav" "$work/3341-6-Ls.wav" "$work/3341-6-Rs.wav" "$work/3341-6.wav"
# sine NAME HZ PHASE GAIN: a 48-kHz stereo sine starting PHASE percent into its cycle, GAIN dB from full
# scale, faded in and out over 0.5 s (an abrupt start would overshoot between samples).
sine() { sox -n -r 48000 -b 24 -c 2 "$work/$1.wav" synth 10 sine "$2" 0 "$3" gain "$4" fade h 0.5 10 0.5; }
sine tp-12k-45 12000 12.5 -6     # samples at −9.0 dBFS
sine tp-8k-0 8000 0 -6           # samples at −7.2 dBFS
sine tp-6k-22 6000 6.25 -6       # samples at −6.7 dBFS
sine tp-12k-over 12000 12.5 2.5  # samples at −0.5 dBFS, true peak above full scale
tone 3342-1 2 "20:-20 20:-30"
tone 3342-2 2 "20:-20 20:-15"
tone 3342-3 2 "20:-40 20:-20"
tone 3342-4 2 "20:-50 20:-35 20:-20 20:-35 20:-50"

fail=0
check() {  # check CASE FIELD EXPECTED UNIT [TOLERANCE]
  local value tolerance=${5:-0.1} label=$1
  [[ $1 == [0-9]* ]] && label="EBU Tech $1"
  value=$("$earmark" analyze --json "$work/$1.wav" | python3 -c "import json,sys; v=json.load(sys.stdin)['loudness']['$2']; print('null' if v is None else f'{v:.3f}')")
  if python3 -c "import sys; v='$value'; sys.exit(0 if v != 'null' and abs(float(v) - $3) <= $tolerance else 1)"; then
    printf 'ok    %-17s %-10s expected %6.1f %-4s measured %8s\n' "$label" "$2" "$3" "$4" "$value"
  else
    printf 'FAIL  %-17s %-10s expected %6.1f %-4s measured %8s\n' "$label" "$2" "$3" "$4" "$value"
    fail=1
  fi
}
for c in 1 3 4 5 6; do check "3341-$c" integrated -23 LUFS; done
check 3341-2 integrated -33 LUFS
check 3342-1 range 10 LU
check 3342-2 range 5 LU
check 3342-3 range 20 LU
check 3342-4 range 15 LU
for c in tp-12k-45 tp-8k-0 tp-6k-22; do check "$c" truePeak -6 dBTP 0.2; done
check tp-12k-over truePeak 2.5 dBTP 0.2
exit $fail
