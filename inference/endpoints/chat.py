"""Placeholder: filled in by the issue that adds this endpoint."""

from ninja import Router

router = Router()
