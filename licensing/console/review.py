"""Reviewing the ledger, for the transactions admin and /manage/v1/transactions alike: one
FilterSet over `Transaction` (its choices scoped to the caller's institution), the totals of a
filtered set in one aggregate query, and a CSV export of a queryset streamed in constant memory.

Search (`q`): terms separated by spaces (double quotes keep spaces inside one term), all of
which must match:
- `key=value`: the metadata key `key` has the value `value` (numbers and true/false match
  their JSON values too);
- a bare word: a request id or an answer id starts with it, or any metadata value equals it.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import django_filters
from asgiref.sync import sync_to_async
from django import forms
from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.db.models import BooleanField, Count, F, Func, Max, Min, Q, Sum
from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from catalog.models import Model as CatalogModel
from catalog.models import Provider
from core.instants import offset_problem

from ..access.scoping import scope_of, scoped
from ..ledger.record import LEDGER_COLUMNS
from ..models import ApiKey, EndUser, Institution, License, Outcome, Transaction
from ..rules.money import rate_of
from ..rules.policy import SERVICES

SEARCH_MAX_CHARS = 500
MODEL_MATCHES_MAX = 200  # catalog models one model filter may stand for
SEARCH_MAX_TERMS = 8
HEX = re.compile(r"[0-9a-fA-F]+")
JSON_NUMBER = re.compile(r"-?(0|[1-9]\d{0,14})(\.\d{1,15})?")


# --- filters -----------------------------------------------------------------------------------


def _scoped(model, *related):
    def queryset(request):
        if request is None:
            return model.objects.none()
        return scoped(model.objects.select_related(*related), scope_of(request.user))

    return queryset


def licenses_of(institution_id: int) -> list[int]:
    return list(License.objects.filter(institution_id=institution_id).values_list("pk", flat=True))


def scoped_ledger(queryset, scope):
    """`licensing.access.scoping.scoped` for ledger rows, by the institution's license ids rather
    than a join: PostgreSQL then knows how many rows those licenses have, and a small institution's
    newest page is read from `tx_license_time` (0.3 ms) instead of by walking every
    institution's newest rows until 50 match (107 ms on a million; bench/review.py)."""
    if scope.superuser:
        return queryset
    if scope.institution_id is None or not scope.allows(Transaction, "view"):
        return queryset.none()
    return queryset.filter(license_id__in=licenses_of(scope.institution_id))


def _provider_choices():
    return [(slug, slug) for slug in Provider.objects.values_list("slug", flat=True)]


class InstantField(forms.Field):
    """An ISO 8601 date or date-time; one without an offset is in the current time zone (the
    admin's pages: the institution's, licensing.console.local_time; the management API: UTC),
    one with an offset no time zone has (core.instants) is refused."""

    default_error_messages = {
        "invalid": _(
            "Enter an ISO 8601 date or date-time, e.g. 2026-03-01 or 2026-03-01T08:30 "
            "(the page's time zone, UTC in the management API, unless it has an offset)."
        ),
    }

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, datetime):
            parsed = value
        else:
            text = str(value).strip()
            if len(text) > 40 or "\x00" in text:
                raise ValidationError(self.error_messages["invalid"], code="invalid")
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                raise ValidationError(self.error_messages["invalid"], code="invalid") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.get_current_timezone())
        problem = offset_problem(parsed)
        if problem:
            raise ValidationError(problem, code="offset")
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class InstantFilter(django_filters.Filter):
    field_class = InstantField


class IntegerFilter(django_filters.Filter):
    field_class = forms.IntegerField


class ReviewForm(forms.Form):
    def clean(self):
        super().clean()
        cleaned = self.cleaned_data  # what Form.clean returns (typed Optional in the stubs)
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and until <= since:
            raise ValidationError(_("'until' (exclusive) must be later than 'since'."))
        return cleaned


class MetadataMatch(Func):
    """True when the row's metadata has `value` under `key` (any key when `key` is None).

    PostgreSQL: a jsonpath match (`@?`), which a GIN index on the column can answer; SQLite:
    json_each. Values are compared as text; numbers and true/false also as JSON values."""

    output_field = BooleanField()

    def __init__(self, key: str | None, value: str):
        super().__init__(F("metadata"))
        self.key, self.value = key, value

    # Its own SQL: Func's function/template/arg_joiner parameters do not apply.
    def as_sql(self, compiler, connection, **extra_context):  # type: ignore[override]
        column, params = compiler.compile(self.source_expressions[0])
        text = (
            "CASE m.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
            "ELSE CAST(m.value AS TEXT) END"
        )
        where = f"m.type NOT IN ('object', 'array') AND {text} = %s"
        extra = [self.value]
        if self.key is not None:
            where = f"m.key = %s AND {where}"
            extra.insert(0, self.key)
        return f"EXISTS (SELECT 1 FROM json_each({column}) AS m WHERE {where})", (
            *params,
            *extra,
        )

    def as_postgresql(self, compiler, connection, **extra_context):
        column, params = compiler.compile(self.source_expressions[0])
        return f"({column} @? %s::jsonpath)", (*params, self.jsonpath())

    def jsonpath(self) -> str:
        accessor = "$.*" if self.key is None else "$." + json.dumps(self.key, ensure_ascii=False)
        tests = ["@ == " + json.dumps(self.value, ensure_ascii=False)]
        if JSON_NUMBER.fullmatch(self.value):
            tests.append(f"@ == {self.value}")
        elif self.value in ("true", "false"):
            tests.append(f"@ == {self.value}")
        return f"{accessor} ? ({' || '.join(tests)})"


class StartsWith(Func):
    """A case-sensitive prefix match on PostgreSQL and SQLite alike. PostgreSQL: `LIKE 'p%'` on
    the column itself, which a btree (varchar_pattern_ops) index answers; SQLite: `GLOB 'p*'`
    (its LIKE ignores case)."""

    output_field = BooleanField()

    def __init__(self, field: str, prefix: str):
        super().__init__(F(field))
        self.prefix = prefix

    # Its own SQL: Func's function/template/arg_joiner parameters do not apply.
    def as_sql(self, compiler, connection, **extra_context):  # type: ignore[override]
        column, params = compiler.compile(self.source_expressions[0])
        pattern = re.sub(r"([*?\[])", r"[\1]", self.prefix) + "*"
        return f"{column} GLOB %s", (*params, pattern)

    def as_postgresql(self, compiler, connection, **extra_context):
        column, params = compiler.compile(self.source_expressions[0])
        pattern = re.sub(r"([\\%_])", r"\\\1", self.prefix) + "%"
        return f"{column} LIKE %s", (*params, pattern)


def models_matching(term: str) -> list[str]:
    """The model names a model filter stands for: the catalog's models whose name holds `term`
    in any case (`GPT-4O` finds gpt-4o, `4o` every gpt-4o*), and `term` itself as typed (a name
    the catalog does not list: a model a client asked for and was refused). The ledger is then
    matched by equality (`IN`), which an index could answer, rather than by a case-insensitive
    substring, which none can: the catalog is a small table, the ledger a large one."""
    term = term.strip()
    found = CatalogModel.objects.filter(model_id__icontains=term).order_by("model_id")
    names = list(found.values_list("model_id", flat=True)[:MODEL_MATCHES_MAX])
    return list(dict.fromkeys([*names, term]))


def parse_search(text: str) -> list[tuple[str | None, str]]:
    """`q` as (key, value) terms; key None: a bare word."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.escape = ""  # a backslash is an ordinary character in ids and values
    lexer.quotes = '"'  # and so is an apostrophe (O'Brien)
    lexer.commenters = ""
    try:
        words = list(lexer)
    except ValueError:
        raise ValidationError(_("A quote in the search is not closed.")) from None
    if len(words) > SEARCH_MAX_TERMS:
        raise ValidationError(f"At most {SEARCH_MAX_TERMS} search terms.")
    terms: list[tuple[str | None, str]] = []
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key and value:
            terms.append((key, value))
        elif word.strip("="):
            terms.append((None, word.strip("=")))
    return terms


def search_condition(key: str | None, value: str) -> Q:
    if key is not None:
        return Q(MetadataMatch(key, value))
    # Request ids are lowercase hex (uuid4().hex): an id pasted in capitals still matches.
    request_id = value.lower() if HEX.fullmatch(value) else value
    return (
        Q(StartsWith("request_id", request_id))
        | Q(StartsWith("upstream_id", value))
        | Q(MetadataMatch(None, value))
    )


class TransactionFilter(django_filters.FilterSet):
    """The review filters: the query parameters of the admin's filter bar and of the API."""

    institution = django_filters.ModelChoiceFilter(
        field_name="license__institution",
        queryset=_scoped(Institution),
        label=_("institution"),
        method="filter_institution",
    )
    license = django_filters.ModelChoiceFilter(queryset=_scoped(License), label=_("license"))
    api_key = django_filters.ModelChoiceFilter(
        label=_("API key"), queryset=_scoped(ApiKey, "license")
    )
    end_user = django_filters.ModelChoiceFilter(
        queryset=_scoped(EndUser, "license"), label=_("end user")
    )
    service = django_filters.ChoiceFilter(
        choices=[(s, s) for s in SERVICES], empty_label=_("any"), label=_("service")
    )
    model = django_filters.CharFilter(method="filter_model", max_length=200, label=_("model"))
    provider = django_filters.ChoiceFilter(
        choices=_provider_choices, empty_label=_("any"), label=_("provider")
    )
    outcome = django_filters.ChoiceFilter(
        label=_("status class"), choices=Outcome.choices, empty_label=_("any")
    )
    status = IntegerFilter(
        field_name="status_code", min_value=100, max_value=599, label=_("status")
    )
    failed_over = django_filters.BooleanFilter(method="filter_failed_over", label=_("failed over"))
    since = InstantFilter(field_name="created_at", lookup_expr="gte", label=_("from"))
    until = InstantFilter(field_name="created_at", lookup_expr="lt", label=_("to"))
    q = django_filters.CharFilter(
        method="search", label=_("search"), max_length=SEARCH_MAX_CHARS, validators=[parse_search]
    )

    class Meta:
        model = Transaction
        fields: list[str] = []
        form = ReviewForm

    def filter_institution(self, queryset, name, value):
        return queryset.filter(license_id__in=licenses_of(value.pk))  # see scoped_ledger

    def filter_failed_over(self, queryset, name, value):
        # More than one provider call: an attempt failed and another connection was tried
        # (the `failovers` column says which and why; docs/routing.md).
        return queryset.filter(attempts__gt=1) if value else queryset.filter(attempts__lte=1)

    def filter_model(self, queryset, name, value):
        names = models_matching(value)
        return queryset.filter(Q(requested_model__in=names) | Q(billed_model__in=names))

    def search(self, queryset, name, value):
        for key, term in parse_search(value):
            queryset = queryset.filter(search_condition(key, term))
        return queryset


# --- totals ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Totals:
    rows: int
    credits: int
    tokens: int
    images: int
    first: datetime | None = None  # the oldest and newest row's time
    last: datetime | None = None


def transaction_totals(queryset) -> Totals:
    """Rows, credits, tokens and images of a filtered set, and its first and last time, in one
    aggregate query; it reads only columns the covering index `tx_license_time` holds."""
    found = queryset.order_by().aggregate(
        rows=Count("*"),
        credits=Sum("credits"),
        tokens=Sum("total_tokens"),
        images=Sum("images"),
        first=Min("created_at"),
        last=Max("created_at"),
    )
    first, last = found.pop("first"), found.pop("last")
    return Totals(
        **{name: int(value or 0) for name, value in found.items()}, first=first, last=last
    )


# --- the CSV export ----------------------------------------------------------------------------

# (header, queryset path): names rather than ids, through joins.
CSV_COLUMNS = tuple((column.csv, column.path) for column in LEDGER_COLUMNS if column.csv)
# Columns that are no database path: what each is made of, and how.
RATE_PATHS = (
    "license__institution__currency",
    "license__institution__micro_credits_per_currency_unit",
)
COMPUTED_COLUMNS = {
    "cost": (("credits", *RATE_PATHS), lambda credits, *rate: rate_of(*rate).format(credits)),
}
CSV_CHUNK_ROWS = 2000
# What a spreadsheet runs as a formula (OWASP, "CSV Injection"): a cell starting with one of
# these, also after leading whitespace (spreadsheets skip spaces and line breaks before "="), or
# starting with a tab or a carriage return at all.
FORMULA_STARTS = ("=", "+", "-", "@")
CONTROL_STARTS = ("\t", "\r")


def iso_utc(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def safe_cell(value):
    """Text a spreadsheet would run as a formula is prefixed with a quote (every CSV cell the
    gateway writes goes through here: `csv_chunks`). Leading whitespace is any Unicode
    whitespace (spaces, tabs, CR, LF, no-break spaces), not only ASCII."""
    if isinstance(value, str) and (
        value.startswith(CONTROL_STARTS) or value.lstrip().startswith(FORMULA_STARTS)
    ):
        return "'" + value
    return value


def _csv_cell(value):
    if value is None:
        return ""
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return safe_cell(value)


class _Line:
    """csv.writer's file: each write returns the line instead of keeping it."""

    def write(self, value):
        return value


def _json_value(value):
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def ledger_pages(queryset, columns=CSV_COLUMNS, computed=COMPUTED_COLUMNS):
    """The rows of a queryset as JSON objects (the CSV's headers as keys; instants in UTC,
    decimals as text), newest first, a page at a time like `csv_chunks`."""
    headers = [header for header, _ in columns]
    paths, cells = _row_reader(columns, computed, cell=_json_value)
    for page in _pages(queryset, paths, CSV_CHUNK_ROWS):
        yield [dict(zip(headers, cells(row), strict=True)) for row in page]


def _row_reader(columns, computed, cell=None):
    """The database paths to read, and a function from one read row to the CSV's cells (or
    to `cell`'s values)."""
    cell = cell or _csv_cell
    paths: list[str] = []
    makers = []
    for _header, path in columns:
        sources, make = computed.get(path, ((path,), None))
        start = len(paths)
        paths.extend(sources)
        makers.append((start, len(paths), make))

    def cells(row):
        return [cell(make(*row[a:b]) if make else row[a]) for a, b, make in makers]

    return paths, cells


def csv_chunks(
    queryset, chunk_rows: int = CSV_CHUNK_ROWS, columns=CSV_COLUMNS, computed=COMPUTED_COLUMNS
):
    """The CSV of a queryset, newest first, in pieces of `chunk_rows` lines. Rows are read a
    page at a time (`_pages`), so memory does not grow with the number of rows. `columns`:
    (header, path) pairs; `computed`: paths made from others."""
    writer = csv.writer(_Line())
    yield writer.writerow([header for header, _ in columns])
    paths, cells = _row_reader(columns, computed)
    for page in _pages(queryset, paths, chunk_rows):
        yield "".join(writer.writerow(cells(row)) for row in page)


def _pages(queryset, paths: list[str], size: int):
    """The rows newest first, `size` at a time, each page the rows after the last one read
    (by `created_at`, then `id`: keyset pagination). Not a server-side cursor: one of those
    is declared WITH HOLD and cannot move between the server connections of a PgBouncer in
    transaction mode, and each page here is a query of its own, so the export works unchanged
    behind one (docs/decisions/database.md). Rows written during the export are newer than
    its first page and are not in it."""
    ordered = queryset.order_by("-created_at", "-id")
    page = ordered
    while True:
        rows = list(page.values_list("created_at", "id", *paths)[:size])
        if rows:
            yield [row[2:] for row in rows]
        if len(rows) < size:
            return
        created_at, last_id = rows[-1][0], rows[-1][1]
        page = ordered.filter(
            Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=last_id)
        )


def _next_or_none(chunks: Iterator[str]) -> str | None:
    return next(chunks, None)


class _AsyncChunks:
    """A sync generator consumed from the event loop (ASGI) one piece at a time, on the
    request's own thread (the connection its pages are read on). Django
    calls `close` (on that thread too) when the response ends, also after a disconnect."""

    def __init__(self, chunks):
        self._chunks = chunks
        self._next = sync_to_async(_next_or_none, thread_sensitive=True)

    def __aiter__(self):
        return self

    async def __anext__(self):
        chunk = await self._next(self._chunks)
        if chunk is None:
            raise StopAsyncIteration
        return chunk.encode()

    def close(self):
        self._chunks.close()


def csv_response(
    request, queryset, filename: str = "transactions.csv", columns=CSV_COLUMNS, computed=None
) -> StreamingHttpResponse:
    """A streamed CSV download of `queryset` (the ledger's columns unless told). Under ASGI the
    content is an async iterator: Django would otherwise read a sync one into a list first."""
    chunks = csv_chunks(
        queryset, columns=columns, computed=COMPUTED_COLUMNS if computed is None else computed
    )
    return download(request, chunks, "text/csv; charset=utf-8", filename)


def download(request, chunks: Iterator[str], content_type: str, filename: str):
    """A streamed download of text `chunks` (read on the request's thread, a piece at a time,
    also under ASGI), never cached."""
    django_request = getattr(request, "_request", request)  # DRF wraps Django's request
    content: _AsyncChunks | Iterator[bytes]
    if isinstance(django_request, ASGIRequest):
        content = _AsyncChunks(chunks)
    else:
        content = (chunk.encode() for chunk in chunks)
    response = StreamingHttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


def export_filename(now: datetime | None = None) -> str:
    return f"transactions-{(now or datetime.now(UTC)):%Y%m%d-%H%M%S}.csv"
