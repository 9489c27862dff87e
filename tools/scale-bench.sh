#!/usr/bin/env bash
# Scale benchmark: matching against catalogs of 100 h, 1,000 h and 10,000 h of audio. Each catalog holds
# the 103 real tracks of the public corpus (titled by corpus id, as in tools/bench.sh) and then synthetic
# tracks grown from their signatures (EarmarkSynthetic) until it holds the size. For each size it prints
# the build speed (tracks/s, × real time) and the catalog's size (MB, MB per hour); then, in a child
# process that only matches, recall@1 by degradation × clip length, false positives on the negatives,
# warm latency of Matcher.match for matched and no-match clips (all and 10-s clips: median, p95, p99),
# the first query and the peak RSS; the skew set's recall (SKEW=1); and the wall time of the real CLI
# (`earmark match CLIP.earsig --json`) as a fresh process on 10 + 10 clips, with the catalog in the page
# cache and evicted from it (posix_fadvise on the catalog's own files). A summary table ends the run,
# with each size's latencies relative to the smallest.
#
# Each size has a time budget (MINUTES, default 14; 0: none): three quarters for the matching process,
# which takes the clips in an order that measures every degradation × length cell however far it gets
# (the summary's "clips" column says how far), a quarter for the CLI runs.
#
# Catalogs are cached under ~/.cache/earmark-corpus/scale (scale-SIZEh-seedN-sigV-schemaS.earcat, built under a
# temporary name and renamed when complete); a larger one starts as a copy of the next smaller. Clip
# signatures are cached there too. The first 10,000-h build takes hours; once the catalogs are cached,
# a full run takes well under an hour on two cores. The output is also kept in scale/logs/.
#
#   tools/scale-bench.sh                               # 100 h, 1,000 h and 10,000 h; query set bench-23-300
#   SIZES=100 QUERIES=bench-3-60 tools/scale-bench.sh  # a quick run
#   SKEW=1 tools/scale-bench.sh                        # also the skew set (speed ±5/±10 %, tempo ±10 %, pitch ±1 semitone, 10 s)
#   SEED=2 tools/scale-bench.sh                        # other synthetic tracks (other catalogs)
#   MINUTES=0 tools/scale-bench.sh                     # every clip at every size, however long it takes
#   tools/scale-bench.sh --cold-sample 20              # extra earmark-scale-bench flags (see earmark-scale-bench --help)
#   tools/scale-bench.sh --postgres                    # each catalog's copy in a PostgreSQL 15 server instead of the file: a
#                                                      # cluster kept in $EARMARK_PG_DIR (default /var/tmp/earmark-scale-postgres),
#                                                      # started on a free port for the run and stopped after it
#   SHARDS=3 tools/scale-bench.sh --postgres          # … sharded: that server is the coordinator of 3 more clusters started
#                                                      # beside it on loopback TCP ($EARMARK_PG_DIR/shard-K)
#   tools/scale-bench.sh --clients 8                   # also the throughput of 8 matching threads at once, each its own store
#   tools/scale-bench.sh --postgres --writers 1,4      # also ingest speed into a new catalog with 1 and then 4 writers at once
#   tools/scale-bench.sh --reversed-share 0.25         # the large-catalog issue's generator: 3/4 of the synthetic stretches
#                                                      # play forwards, bin-shifted, time-scaled copies of real audio
#                                                      # (the default reverses all: no speed/pitch copies of real audio)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/corpus.sh
SIZES=${SIZES:-100,1000,10000}
QUERIES=${QUERIES:-bench-23-300}
SEED=${SEED:-1}
MINUTES=${MINUTES:-14}

corpus_ready
if [[ $QUERIES =~ ^bench-([0-9]+)-([0-9]+)$ ]]; then
  QDIR=$(corpus_queries "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
else
  QDIR=$ROOT/queries/$QUERIES
  [ -f "$QDIR/queries.tsv" ] || { echo "no query set $QDIR (and $QUERIES is not bench-PER_TRACK-NEGATIVES)" >&2; exit 2; }
fi
skew=()
if [ "${SKEW:-0}" = 1 ]; then
  SKEWQ=$(corpus_skew_queries)
  skew=(--skew-queries "$SKEWQ")
fi
for product in earmark earmark-scale-bench; do
  swift build -c release --scratch-path .build/tools --product "$product" 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
done
bin="$(swift build -c release --scratch-path .build/tools --show-bin-path)"
if [[ " $* " == *" --postgres "* ]]; then
  PGBIN=/usr/lib/postgresql/15/bin
  PGDIR=${EARMARK_PG_DIR:-/var/tmp/earmark-scale-postgres}
  as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  # start_cluster DIR LISTEN SHARED_BUFFERS: a cluster in DIR/data (made once), its socket in DIR, started on a free
  # port (in $port) that listens on LISTEN ('' for the socket only).
  start_cluster() {
    mkdir -p "$1"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$1"
    [ -f "$1/data/PG_VERSION" ] || as_pg "$PGBIN/initdb" -D "$1/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_pg "$PGBIN/pg_ctl" -D "$1/data" -l "$1/server.log" -w -t 300 \
      -o "-p $port -k $1 -c listen_addresses='$2' -c shared_buffers=$3 -c max_connections=50" start >/dev/null
    stop_all="as_pg $PGBIN/pg_ctl -D $1/data -m fast -w stop >/dev/null; ${stop_all:-}"
    trap "$stop_all" EXIT
  }
  start_cluster "$PGDIR" "" 1GB
  export PGHOST=$PGDIR PGPORT=$port PGUSER=postgres
  echo "PostgreSQL 15 in $PGDIR, socket $PGDIR/.s.PGSQL.$PGPORT"
  # SHARDS=N: N more clusters on loopback TCP, each catalog's copy sharded over them (the first is the coordinator).
  shard_args=()
  for k in $(seq 1 "${SHARDS:-0}"); do
    start_cluster "$PGDIR/shard-$k" 127.0.0.1 512MB
    shard_args+=(--shard "postgres://postgres@127.0.0.1:$port")
    echo "shard $k: PostgreSQL 15 in $PGDIR/shard-$k, 127.0.0.1:$port"
  done
fi
mkdir -p "$ROOT/scale/logs"
log="$ROOT/scale/logs/scale-bench-$(date -u +%Y%m%dT%H%M%SZ).log"
"$bin/earmark-scale-bench" --corpus "$ROOT/corpus/public" --queries "$QDIR" "${skew[@]}" --sizes "$SIZES" --seed "$SEED" \
  --minutes "$MINUTES" --cache "$ROOT/scale" --earmark "$bin/earmark" ${shard_args[@]+"${shard_args[@]}"} "$@" 2>&1 | tee "$log"
echo "output kept in $log"
