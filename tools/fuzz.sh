#!/usr/bin/env bash
# Builds Earmark's libFuzzer targets (with AddressSanitizer and LeakSanitizer) and runs each for a
# bounded time on a scratch copy of its seed corpus: Fuzz/corpus/NAME plus Fuzz/regressions/NAME
# (and, for `model`, the header of the local YAMNet model when tools/fetch-model.sh has made one),
# with the dictionary Fuzz/dict/NAME.dict when there is one.
#
# Usage: tools/fuzz.sh [--seconds N] [--keep-corpus] [NAME…]
#
#   NAME            signature, model, catalog, wav, csv, speech-model, postgres-url (default: all), run one after the other
#   --seconds N     seconds per target (default 60)
#   --keep-corpus   keep the grown corpus of the previous run instead of starting from the seeds
#
# Bounds per target: -rss_limit_mb=$FUZZ_RSS_MB (2048), -malloc_limit_mb=$FUZZ_MALLOC_MB (256: no single
# allocation may be larger), -timeout=$FUZZ_TIMEOUT (10 s per input). Prints per target the executions,
# coverage (cov: edges, ft: features), corpus size, peak RSS, crashes and leaks, then a summary; exits 1 when
# any target crashed, leaked, ran out of memory or timed out, printing the path of the reproducer.
#
# Where things go (.build-fuzz/, ignored by git; the committed corpora are never written):
#   .build-fuzz/release/fuzz-NAME       the fuzz executables (swift build --scratch-path .build-fuzz)
#   .build-fuzz/runs/NAME/corpus/       the corpus of the last run
#   .build-fuzz/runs/NAME/fuzz.log      libFuzzer's output of the last run
#   .build-fuzz/findings/NAME/          reproducers: crash-*, leak-*, oom-*, timeout-* (kept across runs)
#
# A reproducer replays without the fuzzer: `swift run fuzz-NAME FILE` (a plain build replays the files it is
# given). Once fixed, copy it to Fuzz/regressions/NAME/, where `swift test --filter ReplayTests` replays it.
# Needs only the Swift toolchain: it ships libFuzzer, the sanitizer runtimes and llvm-symbolizer.
set -euo pipefail

me=fuzz.sh
all=(signature model catalog wav csv speech-model postgres-url)
seconds=60
keep=0
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) [[ ${2:-} =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || { echo "$me: --seconds needs a positive number" >&2; exit 2; }
               seconds=$2; shift ;;
    --seconds=*) seconds=${1#*=}; [[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || { echo "$me: --seconds needs a positive number" >&2; exit 2; } ;;
    --keep-corpus) keep=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "$me: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [[ " ${all[*]} " == *" $1 "* ]] || { echo "$me: unknown target $1 (one of: ${all[*]})" >&2; exit 2; }
       targets+=("$1") ;;
  esac
  shift
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
rss_mb=${FUZZ_RSS_MB:-2048}
malloc_mb=${FUZZ_MALLOC_MB:-256}
per_input=${FUZZ_TIMEOUT:-10}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scratch=$repo/.build-fuzz

# The toolchain's runtimes (Swift for Linux ships them; no Debian package is needed).
swift_bin=$(dirname "$(readlink -f "$(command -v swift)")")
clang_lib=$(ls -d "$swift_bin"/../lib/clang/*/lib/linux 2>/dev/null | head -n 1 || true)
for rt in fuzzer asan; do
  [ -n "$clang_lib" ] && [ -f "$clang_lib/libclang_rt.$rt-x86_64.a" ] || {
    echo "$me: this Swift toolchain has no libclang_rt.$rt (looked in $swift_bin/../lib/clang/*/lib/linux)" >&2; exit 1; }
done
symbolizer=$swift_bin/llvm-symbolizer
[ -x "$symbolizer" ] || symbolizer=$(command -v llvm-symbolizer || true)

# Build: release with -DFUZZING (the targets' main hands over to libFuzzer), lld (gold warns about ASan symbols).
mkdir -p "$scratch"
build_start=$(date +%s)
for t in "${targets[@]}"; do
  nice -n 5 swift build -c release --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING \
    -Xswiftc -use-ld=lld --product "fuzz-$t" </dev/null >"$scratch/fuzz-build.log" 2>&1 || {
    cat "$scratch/fuzz-build.log" >&2; echo "$me: building fuzz-$t failed" >&2; exit 1; }
  if grep -q "warning:" "$scratch/fuzz-build.log"; then grep "warning:" "$scratch/fuzz-build.log" >&2; fi
done
rm -f "$scratch/fuzz-build.log"
echo "$me: built ${targets[*]/#/fuzz-} in $(( $(date +%s) - build_start )) s"

# The local YAMNet model, if any: its header (truncated before the weights) is a seed for `model`.
model_file=${EARMARK_MODEL_DIR:-$repo/models}/yamnet.emodel

export SWIFT_BACKTRACE=enable=no     # libFuzzer and ASan report crashes; Swift's backtracer would get in the way
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0:handle_abort=1}
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer

failed=()
summary=()
for t in "${targets[@]}"; do
  run=$scratch/runs/$t
  findings=$scratch/findings/$t
  mkdir -p "$run" "$findings"
  if [ $keep -eq 0 ] || [ ! -d "$run/corpus" ]; then
    rm -rf "$run/corpus"
    mkdir -p "$run/corpus"
    cp Fuzz/corpus/"$t"/* "$run/corpus/"
    if [ -d "Fuzz/regressions/$t" ] && [ -n "$(ls -A "Fuzz/regressions/$t")" ]; then cp Fuzz/regressions/"$t"/* "$run/corpus/"; fi
    if [ "$t" = model ] && [ -f "$model_file" ]; then
      python3 - "$model_file" "$run/corpus/yamnet-header-only.emodel" <<'PY'
import struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(16)
    body = f.read(struct.unpack("<I", head[12:16])[0])
with open(sys.argv[2], "wb") as f:
    f.write(head + body)
PY
    fi
  fi
  before=$(ls "$findings" | wc -l)
  echo "$me: fuzz-$t for $seconds s ($(ls "$run/corpus" | wc -l) inputs to start from)"
  dict=()
  [ -f "Fuzz/dict/$t.dict" ] && dict=(-dict="Fuzz/dict/$t.dict")
  status=0
  start=$(date +%s)
  "$scratch/release/fuzz-$t" "$run/corpus" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$malloc_mb" \
    -timeout="$per_input" -print_final_stats=1 -artifact_prefix="$findings/" </dev/null >"$run/fuzz.log" 2>&1 || status=$?
  secs=$(( $(date +%s) - start ))
  log=$run/fuzz.log
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+$' || echo "?")
  rss=$(grep -oE 'stat::peak_rss_mb: *[0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+$' || echo "?")
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo "?")
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo "?")
  corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<<"$last" | cut -d' ' -f2 || echo "?")
  crashes=$(grep -cE 'ERROR: (libFuzzer: (deadly signal|out-of-memory|timeout|fuzz target exited)|AddressSanitizer)' "$log" || true)
  leaks=$(grep -c 'ERROR: LeakSanitizer' "$log" || true)
  line=$(printf '%-15s %4s s  %10s execs  cov %5s  ft %6s  corpus %-12s  peak RSS %5s MB  crashes %s  leaks %s' \
    "fuzz-$t" "$secs" "$execs" "$cov" "$ft" "$corp" "$rss" "$crashes" "$leaks")
  echo "$line"
  summary+=("$line")
  if [ $status -ne 0 ] || [ "$crashes" != 0 ] || [ "$leaks" != 0 ]; then
    failed+=("$t")
    grep -E 'ERROR: |SUMMARY: ' "$log" | head -n 5 >&2 || true
    new=$(ls -t "$findings" | head -n $(( $(ls "$findings" | wc -l) - before )) || true)
    for f in $new; do
      echo "$me: fuzz-$t: reproducer $findings/$f (replay: swift run fuzz-$t $findings/$f; log: $log)" >&2
    done
    [ -n "$new" ] || echo "$me: fuzz-$t exited with status $status and left no reproducer; see $log" >&2
  fi
done

echo "$me: summary ($seconds s per target; -rss_limit_mb=$rss_mb -malloc_limit_mb=$malloc_mb -timeout=$per_input)"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "$me: FAILED: ${failed[*]/#/fuzz-} (reproducers under $scratch/findings/)" >&2
  exit 1
fi
echo "$me: no crash, leak, out-of-memory or timeout in ${targets[*]/#/fuzz-}"
