"""The ears and the mouth: audio utilities, VAD and endpointing, speech-to-text, text-to-speech."""
