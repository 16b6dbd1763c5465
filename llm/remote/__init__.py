"""The ``openai`` backend: replies streamed from an OpenAI-compatible chat-completions service
(Inception's Mercury 2, OpenAI, vLLM, llama.cpp's server, …) over server-sent events.

``cadence.llm.create_generator`` imports this package only for ``models.llm.backend: openai``, so
the default offline configuration never loads the client library.
"""

from cadence.llm.remote.generator import OpenAITurnGenerator, create_openai_generator

__all__ = ["OpenAITurnGenerator", "create_openai_generator"]
