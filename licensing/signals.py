"""Saved or deleted rows invalidate the in-process caches the API reads on every request."""

from django.db.models.signals import post_delete, post_save

from core.localcache import clear_all

# Written on the hot path; they are never cached, so their writes must not clear anything.
_NOT_CACHED = {
    "wallet",
    "reservation",
    "transaction",
    "budgetalert",
    "adminprofile",
    "auditevent",
}


def _invalidate(sender, created=False, **kwargs):
    meta = sender._meta
    if meta.app_label != "licensing" or meta.model_name in _NOT_CACHED:
        return
    if meta.model_name == "ssoidentity" and "email" not in (
        kwargs.get("update_fields") or {"email"}
    ):
        # Every sign-in saves its identity; only the e-mail is cached (a front-end key finds a
        # student by it: licensing.access.frontend), and licensing.signin.sso saves the e-mail
        # only when it changed. A new or deleted identity clears.
        return
    if created and meta.model_name == "enduser":
        return  # a JWT's first request provisions its user: a new row is in no cache
    if created and meta.model_name == "coursemember" and not kwargs["instance"].paused:
        return  # a course claim's first use: an unpaused new member changes no snapshot
    clear_all()


post_save.connect(_invalidate, dispatch_uid="licensing-invalidate-save")
post_delete.connect(_invalidate, dispatch_uid="licensing-invalidate-delete")
