import re

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from core.fields import EncryptedTextField

from .connection_options import normalized_base_url, validate_options
from .registry import KIND_CHOICES, credentials_present

MAX_WEIGHT = 1000
_TAG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def parse_tags(value: str) -> tuple[str, ...]:
    """The tags of a comma-separated text, lower-cased, sorted and without repeats."""
    return tuple(sorted({t.strip().lower() for t in value.split(",") if t.strip()}))


def validate_tags(value: str) -> None:
    bad = [tag for tag in parse_tags(value) if not _TAG.match(tag)]
    if bad:
        raise ValidationError(
            _("Invalid tag(s): %(tags)s; a tag is 1-32 lower-case letters, digits, '-' or '_'")
            % {"tags": ", ".join(bad)}
        )


class Provider(models.Model):
    """A neutral provider slug (`direct`, `cloud`, ...) and the wire protocol behind it."""

    slug = models.SlugField(max_length=64, unique=True)
    # The kinds and their facts are declared in catalog.registry.
    kind = models.CharField(max_length=32, choices=KIND_CHOICES)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.slug


class Connection(models.Model):
    """Where and how to reach one provider: base URL and credentials (never listed or logged)."""

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="connections")
    name = models.SlugField(max_length=64, default="default")
    base_url = models.URLField(max_length=500)
    # Encrypted at rest (core.crypto); the key id is not a secret and stays readable.
    api_key = EncryptedTextField(max_length=500, blank=True)
    region = models.CharField(max_length=64, blank=True)
    aws_access_key_id = models.CharField(max_length=200, blank=True)
    aws_secret_access_key = EncryptedTextField(max_length=500, blank=True)
    timeout = models.FloatField(
        null=True, blank=True, help_text=_("Seconds; empty = gateway default")
    )
    # Unpinned requests are spread over a provider's healthy connections by weight; 0 keeps
    # a connection in standby (failover and pins only). docs/routing.md.
    weight = models.PositiveIntegerField(
        default=1,
        db_default=1,
        validators=[MaxValueValidator(MAX_WEIGHT)],
        help_text=_(
            "Share of unpinned traffic, relative to the provider's other connections; "
            "0 = standby, used only when the others fail or when pinned"
        ),
    )
    # Data-residency tags (e.g. "eu,on-premises") that a license type's policy may require.
    tags = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        validators=[validate_tags],
        help_text=_("Comma-separated tags, e.g. eu,on-premises"),
    )
    # What a kind needs beyond a URL and a key (catalog.registry's kind; docs/providers.md):
    # Azure's `api_version` and `deployments` ({model: deployment}), an OpenAI-compatible
    # server's `responses_api` ("native" or "chat").
    options = models.JSONField(default=dict, db_default={}, blank=True)
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "name"], name="uniq_connection_name")
        ]

    def __str__(self):
        return f"{self.provider.slug}/{self.name}"

    def __repr__(self):
        # Credentials must never reach logs or tracebacks.
        return f"<Connection {self.provider_id}/{self.name} {self.base_url}>"

    def clean(self):
        self.tags = ",".join(parse_tags(self.tags or ""))
        if self.provider_id is not None:
            kind = self.provider.kind
            validate_options(kind, self.options if self.options is not None else {})
            if self.base_url:
                self.base_url = normalized_base_url(kind, self.base_url)

    @property
    def has_credentials(self) -> bool:
        """Whether a request may use it: the routing's own test (catalog.registry), on the
        stored values (an encrypted value counts as set; routing also refuses one that does
        not decrypt)."""
        return credentials_present(
            self.provider.kind,
            api_key=self.api_key,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=self.aws_secret_access_key,
        )


# A per-token cost's fee per hosted web search (micro-credits per call of the Responses API's
# hosted `web_search` tool, one `web_search_call` output item each: inference.billing).
HOSTED_SEARCH = "web_search_call"


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def cost_errors(cost) -> list[str]:
    """What is wrong with a cost's hosted search fee (the other keys: `priced`)."""
    if not isinstance(cost, dict) or HOSTED_SEARCH not in cost:
        return []
    if cost.get("type") != "per_token":
        return [f"'{HOSTED_SEARCH}' is a fee of a per_token cost only"]
    value = cost[HOSTED_SEARCH]
    if not _number(value) or not 0 <= value < float("inf"):
        return [f"'{HOSTED_SEARCH}' is micro-credits per hosted web search: a number, 0 or more"]
    return []


def priced(cost, features) -> bool:
    """Whether a catalog model's cost bills something (an empty or unpriced cost bills 0: such a
    model is never activated; docs/decisions/providers.md)."""
    if not isinstance(cost, dict) or not cost.get("type"):
        return False
    if cost["type"] != "per_token":
        return True
    needed = ["prompt"] + (["completion"] if "chat_completions" in (features or ()) else [])
    return all(_number(cost.get(k)) for k in needed)


class Model(models.Model):
    """A catalog entry: what clients see in GET /v1/models, plus what routing and billing need."""

    model_id = models.CharField(max_length=200, unique=True)
    owned_by = models.ForeignKey(
        Provider,
        on_delete=models.PROTECT,
        related_name="owned_models",
        help_text=_("The provider a request for this model goes to when no header pins one."),
    )
    supported_features = models.JSONField(default=list, blank=True)
    input_modality = models.JSONField(default=dict, blank=True)
    output_modality = models.JSONField(default=dict, blank=True)
    cost = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            "Micro-credits. {'type': 'per_token', 'prompt': 0.02, 'completion': ...}, "
            "{'type': 'per_image', 'image': 30000}, ..."
        ),
    )
    options = models.JSONField(
        default=dict,
        blank=True,
        help_text=_("Behaviour flags not shown to clients, e.g. {'accepts_dimensions': true}."),
    )
    listed = models.BooleanField(default=True, help_text=_("Shown by GET /v1/models"))
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model_id"]

    def __str__(self):
        return self.model_id

    def clean(self):
        errors = cost_errors(self.cost)
        if errors:
            raise ValidationError({"cost": errors})


class ProviderModel(models.Model):
    """A provider row for a model: the provider can serve it under `upstream_model_id`."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="provider_rows")
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="model_rows")
    upstream_model_id = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    priority = models.IntegerField(default=100, help_text=_("Lower is tried first"))

    class Meta:
        ordering = ["model__model_id", "priority", "provider__slug"]
        constraints = [
            models.UniqueConstraint(fields=["model", "provider"], name="uniq_model_provider")
        ]
        verbose_name = _("provider row")

    def __str__(self):
        state = "active" if self.active else "inactive"
        return f"{self.model.model_id} via {self.provider.slug} ({state})"

    def clean(self):
        try:
            model = self.model
        except Model.DoesNotExist:  # not chosen yet: the field's own error says so
            return
        if self.active and not priced(model.cost, model.supported_features):
            raise ValidationError(
                {"active": _("A model without a price cannot be served: set its cost first")}
            )
