"""`openai_compatible`: any server that speaks OpenAI's chat completions (vLLM, Ollama,
llama.cpp's server, TGI, SGLang, LM Studio, Mistral's API, EU hosts); the key is optional."""

from __future__ import annotations

from .bridge import ResponsesOverChat
from .openai import OpenAITransport


class OpenAICompatibleTransport(ResponsesOverChat, OpenAITransport):
    kind = "openai_compatible"
