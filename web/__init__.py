"""The browser side of Cadence: the demo server (page, WebRTC signaling, health, metrics) and
the transports that carry a caller's audio in and the agent's voice out.

Depends on ``pipeline/`` only; the stages know nothing of what is here.
"""
