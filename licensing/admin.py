"""The licensing admin pages, for Django's admin autodiscovery: they live in
`licensing.console.admin`, one module per subject, and importing them registers them."""

from .console.admin import (  # noqa: F401
    audit,
    colleagues,
    courses,
    keys,
    licenses,
    lti,
    sso,
    transactions,
    users,
    wallets,
)
