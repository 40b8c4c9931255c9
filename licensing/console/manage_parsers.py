"""The management API's parser (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES names it): a module of
its own, so the setting imports nothing of the API's views."""

from __future__ import annotations

import math

from rest_framework import serializers
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """The management API's JSON bodies: what no database column or JSON encoder can take is a
    400 on the top-level field that holds it, before any serializer sees it: NUL and lone
    surrogates (PostgreSQL refuses the first, UTF-8 the second, and DRF's messages quote a
    refused value back), numbers beyond a 64-bit integer or a float's range (`1e400` reads as
    infinity), and nesting deeper than 32 levels. Settings: REST_FRAMEWORK's parsers."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        if isinstance(data, dict):
            bad = {}
            for name, value in data.items():
                problem = _unstorable(name, 1) or _unstorable(value, 1)
                if problem:
                    shown = name if _unstorable(name, 1) is None else "non_field_errors"
                    bad[shown] = [problem]
            if bad:
                raise serializers.ValidationError(bad)
        else:
            problem = _unstorable(data, 0)
            if problem:
                raise serializers.ValidationError({"non_field_errors": [problem]})
        return data


def _unstorable(value, depth: int) -> str | None:
    """Why a parsed JSON value cannot be taken (None: it can)."""
    if depth > 32:
        return "Nested deeper than 32 levels."
    if isinstance(value, str):
        if "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value):
            return "NUL and lone surrogates are not accepted."
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**63 else "A number out of range."
    if isinstance(value, float):
        return None if math.isfinite(value) else "A number out of range."
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _unstorable(key, depth + 1) or _unstorable(item, depth + 1)
            if problem:
                return problem
    elif isinstance(value, list):
        for item in value:
            problem = _unstorable(item, depth + 1)
            if problem:
                return problem
    return None
