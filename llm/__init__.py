"""Cadence turn generator: block-diffusion LM, AR baseline, training and decoding."""
