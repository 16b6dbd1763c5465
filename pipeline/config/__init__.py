"""Configuration: typed models, a YAML loader with precise errors, and a commented renderer."""

from cadence.pipeline.config.loader import ConfigError, load_config
from cadence.pipeline.config.render import render_config, render_defaults
from cadence.pipeline.config.schema import (
    BudgetConfig,
    CadenceConfig,
    EndOfTurnConfig,
    FaultsConfig,
    InterruptionConfig,
    ModelsConfig,
    STTConfig,
    ThreadsConfig,
    ToolsConfig,
    TracingConfig,
    TTSConfig,
    TurnConfig,
    UnknownOverlayError,
    VADConfig,
)
from cadence.pipeline.config.server import PageConfig, ServerConfig, TelephonyConfig

__all__ = [
    "BudgetConfig",
    "CadenceConfig",
    "ConfigError",
    "EndOfTurnConfig",
    "FaultsConfig",
    "InterruptionConfig",
    "ModelsConfig",
    "PageConfig",
    "STTConfig",
    "ServerConfig",
    "TTSConfig",
    "TelephonyConfig",
    "ThreadsConfig",
    "ToolsConfig",
    "TracingConfig",
    "TurnConfig",
    "UnknownOverlayError",
    "VADConfig",
    "load_config",
    "render_config",
    "render_defaults",
]
