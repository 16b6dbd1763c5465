"""Benchmarks: real clips streamed at the pace of speech, measured stage by stage."""
