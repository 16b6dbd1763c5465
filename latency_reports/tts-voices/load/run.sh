#!/bin/sh
# Piper and hibari take turns level by level (which goes first alternates), so that both see
# the same load from the other engineers on the shared 2-core machine. One fresh process per
# run: each loads its own models.
set -e
cd "$(dirname "$0")/../../.."
M=${MINUTES:-1}
run() {  # voice level
    if [ "$1" = piper ]; then c="-c latency_reports/tts-voices/load/piper.yaml"; else c=""; fi
    nice .venv/bin/cadence loadtest -m tests/data/speech/manifest.jsonl --telephone \
        --transport twilio --sessions "$2" --minutes "$M" $c \
        -o "latency_reports/tts-voices/load/$1" > "latency_reports/tts-voices/load/$1-$2.log" 2>&1
}
run piper 1; run hibari 1
run hibari 4; run piper 4
run piper 8; run hibari 8
