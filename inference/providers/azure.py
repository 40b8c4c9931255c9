"""`azure_openai`: Azure OpenAI (the `api-key` header; deployments in the URL with an
`api-version`, or the v1 API path where the resource offers it)."""

from __future__ import annotations

from .openai import OpenAITransport


class AzureOpenAITransport(OpenAITransport):
    kind = "azure_openai"
