"""The one error every model loader raises when a configured model is not there."""

from __future__ import annotations


class ModelUnavailableError(RuntimeError):
    """A configured model cannot be loaded. The message names the configuration key to set,
    so the fix is one edit away."""

    def __init__(self, config_key: str, value: str, reason: str) -> None:
        super().__init__(f"{config_key} = {value!r}: {reason}. Set `{config_key}` in the config.")
        self.config_key = config_key
        self.value = value
