"""The gateway's two registries, declared once: each provider kind (a wire protocol) and each
service (an endpoint). Routing, the admin, policy, tracing and the API read them from here.

catalog sits below inference (tests/ops/test_layering.py), so the two facts that are inference's
code, a kind's adapter class and a service's operation, are named here by dotted path
(`module.Class`) and imported by inference alone (`inference.providers.adapter_for`,
`inference.api`); `tests/providers/test_registry.py` resolves every path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from django.utils.text import get_text_list
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise
else:
    StrOrPromise = str


class Credentials(StrEnum):
    """What a connection of the kind needs before a request may use it."""

    API_KEY = "api_key"  # an API key
    IAM = "iam"  # an AWS access key id and secret (the API key is not used)
    OPTIONAL = "optional"  # works without a key (OpenAlex: a key only raises the rate limit)
    BUILTIN = "builtin"  # served by the gateway itself: no connection row, `default` implied


@dataclass(frozen=True)
class ProviderKind:
    kind: str  # the value of Provider.kind
    # Its choice label (part of the migration state: changing it is a migration), in English;
    # marked for the catalogues and translated where a page shows it.
    label: str
    endpoints: frozenset[str]  # the internal endpoint names (Service.endpoint) it can serve
    credentials: Credentials
    telemetry_name: str  # gen_ai.provider.name: the GenAI conventions' value, else our own
    adapter: str  # its Transport subclass in inference.providers, as `module.Class`

    def has_credentials(
        self, *, api_key: str, aws_access_key_id: str, aws_secret_access_key: str
    ) -> bool:
        """Whether a connection with these (decrypted or stored) values can be used."""
        if self.credentials in (Credentials.OPTIONAL, Credentials.BUILTIN):
            return True
        if self.credentials is Credentials.IAM:
            return bool(aws_access_key_id and aws_secret_access_key)
        return bool(api_key)

    @property
    def missing_credential(self) -> str:
        """How the spec's 400 names the credential a connection lacks."""
        return "IAM credentials" if self.credentials is Credentials.IAM else "'api_key' credential"


_P = "inference.providers."

# The order is Provider.kind's choices order (the migration state): append new kinds at the end.
PROVIDER_KINDS: dict[str, ProviderKind] = {
    k.kind: k
    for k in (
        ProviderKind(
            "openai",
            gettext_noop("OpenAI REST API"),
            frozenset({"chat_completions", "responses", "embeddings", "image_generation"}),
            Credentials.API_KEY,
            "openai",
            _P + "openai.OpenAITransport",
        ),
        ProviderKind(
            "openrouter",
            gettext_noop("OpenRouter (OpenAI-compatible)"),
            frozenset({"chat_completions", "responses", "embeddings"}),
            Credentials.API_KEY,
            "openrouter",
            _P + "openrouter.OpenRouterTransport",
        ),
        ProviderKind(
            "bedrock",
            gettext_noop("AWS Bedrock Runtime"),
            frozenset({"chat_completions", "responses", "image_generation", "bedrock_embeddings"}),
            Credentials.IAM,
            "aws.bedrock",
            _P + "bedrock.BedrockTransport",
        ),
        ProviderKind(
            "gemini",
            gettext_noop("Google Gemini API"),
            frozenset({"chat_completions", "responses", "image_generation", "gemini_embeddings"}),
            Credentials.API_KEY,
            "gcp.gemini",
            _P + "gemini.GeminiTransport",
        ),
        ProviderKind(
            "websearch",
            gettext_noop("Web search API"),
            frozenset({"web_search"}),
            Credentials.API_KEY,
            "brave_search",
            _P + "search.BraveTransport",
        ),
        ProviderKind(
            "academic",
            gettext_noop("Academic search API"),
            frozenset({"web_search"}),
            Credentials.OPTIONAL,
            "openalex",
            _P + "search.OpenAlexTransport",
        ),
        ProviderKind(
            "fetch",
            gettext_noop("The gateway's own URL fetcher"),
            frozenset({"web_fetch"}),
            Credentials.BUILTIN,
            "inference_gateway",
            _P + "fetch.FetchTransport",
        ),
        ProviderKind(
            "azure_openai",
            gettext_noop("Azure OpenAI"),
            frozenset({"chat_completions", "responses", "embeddings"}),
            Credentials.API_KEY,
            "azure.ai.openai",
            _P + "azure.AzureOpenAITransport",
        ),
        ProviderKind(
            "anthropic",
            gettext_noop("Anthropic Messages API"),
            frozenset({"chat_completions", "responses"}),
            Credentials.API_KEY,
            "anthropic",
            _P + "anthropic.AnthropicTransport",
        ),
        ProviderKind(
            "openai_compatible",
            gettext_noop("OpenAI-compatible server (vLLM, Ollama, llama.cpp, TGI, Mistral, ...)"),
            frozenset({"chat_completions", "responses", "embeddings"}),
            Credentials.OPTIONAL,
            "openai_compatible",
            _P + "openai_compatible.OpenAICompatibleTransport",
        ),
    )
}
KIND_CHOICES = [(k.kind, k.label) for k in PROVIDER_KINDS.values()]


def kind_serves(kind: str, endpoint: str) -> bool:
    spec = PROVIDER_KINDS.get(kind)
    return spec is not None and endpoint in spec.endpoints


def credentials_present(
    kind: str, *, api_key: str, aws_access_key_id: str, aws_secret_access_key: str
) -> bool:
    """The one credentials test: routing (a request) and the connection row (the admin,
    `configure_connection`) both ask it. A kind not declared here needs an API key."""
    spec = PROVIDER_KINDS.get(kind, _UNDECLARED)
    return spec.has_credentials(
        api_key=api_key,
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
    )


def missing_credential(kind: str) -> str:
    return PROVIDER_KINDS.get(kind, _UNDECLARED).missing_credential


_UNDECLARED = ProviderKind("", "", frozenset(), Credentials.API_KEY, "", "")


@dataclass(frozen=True)
class Service:
    """One endpoint. `endpoint` is the spec's internal endpoint name (routing, its 400
    messages, the catalog's `supported_features`, the trace's tool name); `service` is the name
    the policy documents, the ledger, the metrics and GET /v1/license use. They are the same
    except for `web_fetch`, whose policy service is `fetch`: that mapping lives here only."""

    endpoint: str
    operation: str  # its pipeline.Operation subclass, as `module.Class`; the module's `router`
    default_provider: str  # the provider slug a model unknown to the catalog goes to
    telemetry_operation: str  # gen_ai.operation.name (the GenAI conventions' values)
    # In words, for people (the policy form, the admin's lists, the portal): its name, and what
    # a model used through it is for ("chat", "images"; services with the same purpose, the
    # three embeddings endpoints, are one purpose to a student).
    label: StrOrPromise = ""
    purpose: StrOrPromise = ""
    service: str = ""  # the policy/ledger service name; empty: the endpoint name
    feature: str = ""  # the catalog feature GET /v1/models lists it under; empty: the endpoint
    output_modality: str | None = None  # a model must have it (Model.output_modality)
    # Provider slugs reached only through the X-Service-Provider header: failover never goes
    # there unpinned (the spec's "aggregator: opt-in by header only" for embeddings).
    header_only: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "service", self.service or self.endpoint)
        object.__setattr__(self, "feature", self.feature or self.endpoint)


_E = "inference.endpoints."

# The order is the policy documents' (open_policy_document, the admin's choices, the services
# GET /v1/license lists) and the API's (the routers are added in it).
SERVICES: tuple[Service, ...] = (
    Service(
        "chat_completions",
        _E + "chat.ChatCompletions",
        "direct",
        "chat",
        label=_("Chat (chat completions)"),
        purpose=_("chat"),
    ),
    Service(
        "responses",
        _E + "responses.Responses",
        "direct",
        "chat",
        label=_("Responses (the Responses API: chat with tools and reasoning)"),
        purpose=_("responses"),
    ),
    Service(
        "embeddings",
        _E + "embeddings.Embeddings",
        "direct",
        "embeddings",
        header_only=frozenset({"aggregator"}),
        label=_("Embeddings (document search)"),
        purpose=_("embeddings (document search)"),
    ),
    Service(
        "gemini_embeddings",
        _E + "gemini_embeddings.GeminiEmbeddings",
        "multimodal",
        "embeddings",
        feature="embeddings",
        label=_("Embeddings in Gemini's format (document search)"),
        purpose=_("embeddings (document search)"),
    ),
    Service(
        "bedrock_embeddings",
        _E + "bedrock_embeddings.BedrockEmbeddings",
        "cloud",
        "embeddings",
        feature="embeddings",
        label=_("Embeddings in Bedrock's format (document search)"),
        purpose=_("embeddings (document search)"),
    ),
    Service(
        "image_generation",
        _E + "images.ImageGeneration",
        "direct",
        "generate_content",
        output_modality="image",
        label=_("Image generation"),
        purpose=_("images"),
    ),
    # Search and fetch are tools the gateway runs for the client: execute_tool.
    Service(
        "web_search",
        _E + "search.WebSearch",
        "websearch",
        "execute_tool",
        label=_("Web search (results from a search engine or OpenAlex)"),
        purpose=_("web search"),
    ),
    Service(
        "web_fetch",
        _E + "search.Fetch",
        "fetch",
        "execute_tool",
        service="fetch",
        label=_("Fetch (the text of a web page or PDF, read by the gateway)"),
        purpose=_("reading web pages"),
    ),
)
SERVICE_BY_ENDPOINT = {s.endpoint: s for s in SERVICES}
SERVICE_BY_NAME = {s.service: s for s in SERVICES}
POLICY_SERVICES = tuple(s.service for s in SERVICES)
# The text services: a policy's `models.text` rule holds for both (licensing.rules.scopes), and
# a model usable through both is for "chat and responses".
TEXT_SERVICES = ("chat_completions", "responses")


def service_label(name: str) -> str:
    """A policy service's name in words (an unknown name as it is)."""
    service = SERVICE_BY_NAME.get(name)
    return str(service.label) if service is not None else name


def purposes_in_words(services) -> str:
    """What a model used through these policy services is for, in words: "chat and
    responses", "embeddings (document search)", "images" (each purpose once, in SERVICES'
    order)."""
    found = [SERVICE_BY_NAME[name] for name in services if name in SERVICE_BY_NAME]
    found.sort(key=SERVICES.index)
    words = list(dict.fromkeys(str(service.purpose) for service in found))
    return str(get_text_list(words, str(_("and"))))
