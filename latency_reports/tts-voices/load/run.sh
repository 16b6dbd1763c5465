#!/bin/sh
# Piper and hibari take turns level by level (which goes first alternates, and even rounds
# reverse the order of odd ones), so that both see the same load from the other engineers on the shared
# 2-core machine. One fresh process per run; its models load before the level starts.
#   latency_reports/tts-voices/load/run.sh        # round 1 → load/piper, load/hibari
#   ROUND=2 latency_reports/tts-voices/load/run.sh  # round 2 → load/piper-2, load/hibari-2 (3 …)
set -e
cd "$(dirname "$0")/../../.."
M=${MINUTES:-1}
S=${ROUND:+-$ROUND}
run() {  # voice level
    if [ "$1" = piper ]; then c="-c latency_reports/tts-voices/load/piper.yaml"; else c=""; fi
    nice .venv/bin/cadence loadtest -m tests/data/speech/manifest.jsonl --telephone \
        --transport twilio --sessions "$2" --minutes "$M" $c \
        -o "latency_reports/tts-voices/load/$1$S" > "latency_reports/tts-voices/load/$1$S-$2.log" 2>&1
}
if [ $(( ${ROUND:-1} % 2 )) = 1 ]; then
    run piper 1; run hibari 1
    run hibari 4; run piper 4
    run piper 8; run hibari 8
else
    run hibari 1; run piper 1
    run piper 4; run hibari 4
    run hibari 8; run piper 8
fi
