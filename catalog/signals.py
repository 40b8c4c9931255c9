"""Saved or deleted rows invalidate the in-process caches the API reads on every request."""

from django.db.models.signals import post_delete, post_save

from core.localcache import clear_all


def _invalidate(sender, **kwargs):
    if sender._meta.app_label == "catalog":
        clear_all()


post_save.connect(_invalidate, dispatch_uid="catalog-invalidate-save")
post_delete.connect(_invalidate, dispatch_uid="catalog-invalidate-delete")
