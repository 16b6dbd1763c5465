"""Configuration: typed models, a YAML loader with precise errors, and a commented renderer."""

from pipeline.config.loader import ConfigError, load_config
from pipeline.config.models import (
    BudgetConfig,
    CadenceConfig,
    FaultsConfig,
    LlmConfig,
    ModelsConfig,
    OpenAILlmConfig,
    ServerConfig,
    SttConfig,
    TelephonyConfig,
    TracingConfig,
    TtsConfig,
    TurnConfig,
    UnknownOverlayError,
    VadConfig,
)
from pipeline.config.render import render_config, render_defaults

__all__ = [
    "BudgetConfig",
    "CadenceConfig",
    "ConfigError",
    "FaultsConfig",
    "LlmConfig",
    "ModelsConfig",
    "OpenAILlmConfig",
    "ServerConfig",
    "SttConfig",
    "TelephonyConfig",
    "TracingConfig",
    "TtsConfig",
    "TurnConfig",
    "UnknownOverlayError",
    "VadConfig",
    "load_config",
    "render_config",
    "render_defaults",
]
