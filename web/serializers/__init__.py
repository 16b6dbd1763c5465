"""Wire formats of the telephony transports: bytes or JSON in, typed messages out, and back."""
