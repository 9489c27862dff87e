#!/usr/bin/env python3
"""Skewed query clips beyond the shared generator's: speed ±5 % and ±10 % (sox speed, pitch and tempo
together) and tempo ±10 % (pitch kept), with the shared pitch ±1 semitone beside them. Reuses ../shared/corpus/make_queries.py as a module (same cutting,
seeding and output format) and only registers the extra degradations with it.

  tools/make_skew_queries.py --corpus DIR/corpus/public --out DIR/queries/skew --durations 10 --per-track 2 --negatives 0
  (all make_queries.py options apply; --degradations defaults to the extra speeds and tempi, and pitch ±1 semitone)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("EARMARK_SHARED_CORPUS", os.path.join(HERE, "..", "..", "shared", "corpus")))
import make_queries as mq  # noqa: E402

EXTRA = {"speed_p5": 1.05, "speed_m5": 0.95, "speed_p10": 1.10, "speed_m10": 0.90, "tempo_p10": 1.10, "tempo_m10": 0.90}
for name, rate in EXTRA.items():
    mq.RATE[name] = rate          # how much reference one second of clip consumes
    mq.DEGRADATIONS.append(name)  # make_queries' degrade() handles every "speed*" through RATE

if "--degradations" not in sys.argv:
    sys.argv += ["--degradations", ",".join(list(EXTRA) + ["pitch_p1", "pitch_m1"])]
mq.main()
