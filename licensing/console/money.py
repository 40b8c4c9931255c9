"""Micro-credits shown as money in the console (the admin, the review totals, the usage page,
the ledger's API and CSV): each institution's rate (licensing.rules.money), and sums over rows
of institutions that may count in different currencies or rates."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from decimal import Decimal, Inexact, localcontext
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.utils.html import format_html
from django.utils.translation import gettext as _

from core.languages import grouped

from ..models import Institution
from ..rules.money import Rate, format_amount, rate_of

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


def institution_rate(institution: Institution | None) -> Rate:
    if institution is None:
        return rate_of()
    return rate_of(institution.currency, institution.micro_credits_per_currency_unit)


def single_rate(choices, institution_path: str) -> Rate | None:
    """The rate of the one institution a form's choices (institutions, or rows of one at
    `institution_path`) belong to; None when they span several (or none): the currency then
    follows the choice made. An institution admin's choices are their own institution's."""
    if choices is None:
        return None
    ids = list(choices.order_by().values_list(institution_path, flat=True).distinct()[:2])
    if len(ids) != 1:
        return None
    return institution_rate(Institution.objects.filter(pk=ids[0]).first())


def with_money(micro_credits: int | None, institution: Institution | None) -> str:
    """`1.50 EUR (1,500,000 micro-credits)`: the money first, in the institution's currency,
    the exact micro-credits beside it; None is "unlimited"."""
    if micro_credits is None:
        return _("unlimited")
    money = institution_rate(institution).format(micro_credits)
    return _("%(money)s (%(micro)s micro-credits)") % {
        "money": money,
        "micro": grouped(micro_credits),
    }


def ledger_money(queryset) -> str:
    """The money worth of a set of ledger rows (`credits`), each at its institution's rate, one
    amount per currency (`12.50 EUR + 3.00 USD`). Two queries whatever the rows: the credits
    per institution (the ledger joined to its licenses only, so a scoped ledger stays scoped
    by license ids), then the institutions' rates (a small table)."""
    per_institution = (
        queryset.order_by()
        .values("license__institution_id")
        .annotate(total=Sum("credits"))
        .values_list("license__institution_id", "total")
    )
    totals = list(per_institution)
    rates = {
        pk: rate_of(currency, per_unit)
        for pk, currency, per_unit in Institution.objects.values_list(
            "pk", "currency", "micro_credits_per_currency_unit"
        )
    }
    amounts: dict[str, Decimal] = {}
    for institution_id, total in totals:
        rate = rates.get(institution_id) or rate_of()
        amounts[rate.currency] = amounts.get(rate.currency, Decimal(0)) + rate.amount(
            int(total or 0)
        )
    if not amounts:
        return rate_of().format(0)
    return " + ".join(format_amount(amounts[c], c) for c in sorted(amounts))


# --- budgets entered as money -----------------------------------------------------------------

MAX_MICRO_CREDITS = 2**63 - 1  # what a budget column (BigIntegerField) holds
MAX_INPUT_CHARS = 40


def amount_of(micro_credits: int, rate: Rate) -> Decimal:
    """A stored budget as the amount a money input shows: exact, at least two decimals
    (`1500000` at 1,000,000 a unit is `1.50`, `1234` is `0.001234`)."""
    with localcontext(prec=80):
        amount = Decimal(micro_credits) / Decimal(rate.micro_credits_per_unit)
    cents = amount.quantize(Decimal("0.01")) if amount.adjusted() < 60 else amount
    return cents if cents == amount else amount.normalize()


def amount_text(micro_credits: int | None, rate: Rate) -> str:
    """amount_of as plain text, no grouping; None (unlimited) is empty."""
    return "" if micro_credits is None else f"{amount_of(micro_credits, rate):f}"


def to_micro_credits(amount: Decimal, rate: Rate) -> int:
    """An amount of money as micro-credits at `rate`, exactly: a ValidationError for an amount
    below zero, beyond what a budget holds, or finer than one micro-credit. Bounds are checked
    before any arithmetic (`1e999999` never reaches a multiplication), and the product is
    computed with room for every input MoneyField lets through, so nothing is rounded."""
    per_unit = rate.micro_credits_per_unit
    if amount < 0:
        raise ValidationError(_("The amount must be 0 or more (empty = unlimited)."))
    if not amount.is_finite() or amount > MAX_MICRO_CREDITS:
        raise _too_large(rate)
    # Below 10**-20 of a unit nothing but zero is a whole micro-credit (at most 10**12 a unit).
    if amount != 0 and amount.adjusted() < -20:
        raise _too_fine(rate)
    try:
        with localcontext(prec=120) as context:
            context.traps[Inexact] = True
            micro = amount * Decimal(per_unit)
    except ArithmeticError:
        raise _too_fine(rate) from None
    if micro > MAX_MICRO_CREDITS:
        raise _too_large(rate)
    if micro != micro.to_integral_value():
        raise _too_fine(rate)
    return int(micro)


def _too_large(rate: Rate) -> ValidationError:
    most = amount_text(MAX_MICRO_CREDITS, rate)
    return ValidationError(
        _("At most %(most)s %(currency)s.") % {"most": most, "currency": rate.currency}
    )


def _too_fine(rate: Rate) -> ValidationError:
    return ValidationError(
        _(
            "Finer than one micro-credit: 1 %(currency)s is %(per_unit)s micro-credits, so "
            "one micro-credit is %(step)s %(currency)s."
        )
        % {
            "currency": rate.currency,
            "per_unit": grouped(rate.micro_credits_per_unit),
            "step": amount_text(1, rate),
        }
    )


class MoneyInput(forms.TextInput):
    """A money amount's input with its currency beside it. Where the institution is chosen in
    the same form, `currencies` maps each choice of the field `currency_from` to its currency,
    and licensing/static/licensing/money.js shows the chosen one's."""

    def __init__(self, currency: str = "", currency_from: str = "", currencies=None):
        super().__init__(attrs={"inputmode": "decimal", "size": 14})
        self.currency, self.currency_from = currency, currency_from
        self.currencies: dict[str, str] = currencies or {}

    @property
    def media(self):
        return forms.Media(js=["licensing/money.js"] if self.currency_from else [])

    def render(self, name, value, attrs=None, renderer=None):
        html = super().render(name, value, attrs, renderer)
        return format_html(
            '{} <span class="money-currency" data-currency-from="{}" '
            'data-currencies="{}">{}</span>',
            html,
            self.currency_from,
            json.dumps(self.currencies) if self.currencies else "",
            self.currency,
        )


def currencies_of(choices, institution_path: str, limit: int = 500) -> dict[str, str]:
    """Each choice's (by primary key) institution's currency, for MoneyInput's script: a form
    where the institution is chosen (a superuser's). Empty beyond `limit` choices."""
    if choices is None:
        return {}
    rows = list(choices.order_by().values_list("pk", institution_path)[: limit + 1])
    if len(rows) > limit:
        return {}
    rates = {
        pk: rate_of(currency, per_unit).currency
        for pk, currency, per_unit in Institution.objects.filter(
            pk__in={institution for _, institution in rows}
        ).values_list("pk", "currency", "micro_credits_per_currency_unit")
    }
    return {str(pk): rates.get(institution, rate_of().currency) for pk, institution in rows}


class MoneyField(forms.DecimalField):
    """An amount of money typed in the institution's currency (the locale's decimal separator;
    `.` always works). Cleans to a Decimal; the form turns it into micro-credits at the
    institution's rate (MoneyFormMixin), which it may only know once the other fields are
    clean (the institution or the license chosen in the same form)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("localize", True)
        kwargs.setdefault("widget", MoneyInput())
        super().__init__(**kwargs)

    def to_python(self, value):
        if isinstance(value, str) and len(value.strip()) > MAX_INPUT_CHARS:
            raise ValidationError(
                _("Enter an amount of at most %(n)s characters.") % {"n": MAX_INPUT_CHARS}
            )
        return super().to_python(value)


class MoneyFormMixin:
    """A ModelForm whose budget fields (`money_fields`, micro-credits in the model) are entered
    and shown as money at the rate `money_rate()` gives (the institution's); the micro-credits
    are shown beside, in each field's help. A field left as it was keeps its exact stored
    micro-credits (no round trip through a shown amount)."""

    money_fields: tuple[str, ...] = ()
    if TYPE_CHECKING:  # what the mixin is mixed into (a ModelForm), for mypy
        fields: dict[str, forms.Field]
        initial: MutableMapping[str, Any]
        instance: Any
        cleaned_data: dict[str, Any]
        changed_data: list[str]

    def money_rate(self) -> Rate | None:
        """The rate of the institution the row belongs to, once known (None: not yet)."""
        raise NotImplementedError

    def setup_money(
        self,
        shown_rate: Rate | None,
        choices_note: StrOrPromise = "",
        chooser: tuple[str, dict[str, str]] = ("", {}),
    ) -> None:
        """Make each budget field a MoneyField showing the stored value at `shown_rate` (None:
        the institution is chosen in this form; `choices_note` then says whose currency, and
        `chooser` is the choosing field's id and each choice's currency, for the script)."""
        for name in self.money_fields:
            field = self.fields.get(name)
            if field is None or isinstance(field, MoneyField) or field.disabled:
                continue
            stored = getattr(self.instance, name, None)
            currency = shown_rate.currency if shown_rate is not None else ""
            widget = MoneyInput(currency, *chooser) if shown_rate is None else MoneyInput(currency)
            money = MoneyField(required=field.required, label=field.label, widget=widget)
            money.help_text = _money_help(field.help_text, stored, shown_rate, choices_note)
            self.fields[name] = money
            if shown_rate is not None and stored is not None:
                self.initial[name] = amount_of(stored, shown_rate)

    def clean_money(self) -> None:
        """The budget fields as micro-credits (call from `clean`)."""
        rate = self.money_rate()
        for name in self.money_fields:
            field = self.fields.get(name)
            if not isinstance(field, MoneyField) or name not in self.cleaned_data:
                continue
            amount = self.cleaned_data[name]
            if amount is None:
                continue
            if self.instance.pk is not None and name not in self.changed_data:
                self.cleaned_data[name] = getattr(self.instance, name)
                continue
            if rate is None:
                continue  # the institution's field has its own error
            try:
                self.cleaned_data[name] = to_micro_credits(amount, rate)
            except ValidationError as error:
                self.add_error(name, error)  # type: ignore[attr-defined]


def _money_help(
    help_text, stored: int | None, rate: Rate | None, choices_note: StrOrPromise
) -> str:
    """A budget field's help: what it is, its currency and rate, and what it holds now."""
    # The model's help as the page reads it ("Micro-credits per ...", "Mikro-Credits pro ...").
    what = str(help_text or "").replace(_("Micro-credits"), _("The amount")).rstrip(".")
    if rate is None:
        return f"{what}. {choices_note}".strip()
    per_unit = grouped(rate.micro_credits_per_unit)
    parts = [
        what + ".",
        _("In %(currency)s: 1 %(currency)s = %(per_unit)s micro-credits.")
        % {"currency": rate.currency, "per_unit": per_unit},
    ]
    if stored is not None:
        parts.append(
            _("Now %(money)s = %(micro)s micro-credits.")
            % {"money": rate.format(stored), "micro": grouped(stored)}
        )
    return " ".join(part for part in parts if part.strip(". "))
