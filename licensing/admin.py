"""The licensing admin pages, for Django's admin autodiscovery: they live in
`licensing.console.admin`, one module per subject, and in the subject wings
(`licensing.courses.admin`, `licensing.privacy.admin`, `licensing.provisioning.admin`,
`licensing.safeguarding.admin`, `licensing.signin.admin_sso` and `admin_lti`); importing them
registers them."""

from .console.admin import (  # noqa: F401
    audit,
    colleagues,
    keys,
    licenses,
    transactions,
    users,
    wallets,
)
from .courses import admin as courses  # noqa: F401
from .privacy import admin as privacy  # noqa: F401
from .provisioning import admin as provisioning  # noqa: F401
from .safeguarding import admin as safeguarding
from .signin import admin_lti, admin_sso  # noqa: F401

# Imported for its registrations (named here rather than silenced).
__all__ = ["safeguarding"]
