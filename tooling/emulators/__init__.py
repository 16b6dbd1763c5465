"""Other ends of the telephony protocols, played against the server by tests and the bench."""
