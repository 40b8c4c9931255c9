"""The licensing app's models, one module per subject: `institutions` (institutions, license
types, licenses, institution roles, colleagues), `keys` (API keys, JWT issuers, end users),
`money` (wallets, the ledger, budget alerts), `courses`, `signin` (identity providers, LTI),
`provisioning` (SCIM), `safeguarding` (alerts) and `audit`. Every name is re-exported here:
`from licensing.models import X` is the one way in, and Django registers the models (app label
`licensing`, the tables unchanged) by importing this."""

from .audit import AuditEvent
from .courses import Course, CourseMember, CourseTeacher, CourseWindow
from .institutions import (
    AdminProfile,
    Colleague,
    Institution,
    License,
    LicenseType,
    alert_at,
    default_policy,
)
from .keys import ALLOWED_JWT_ALGORITHMS, REGISTERED_JWT_CLAIMS, ApiKey, EndUser, JwtIssuer
from .money import BudgetAlert, Outcome, Reservation, Transaction, Wallet
from .provisioning import ScimGroup, ScimToken, ScimUser
from .safeguarding import SafeguardingAlert, SafeguardingSettings
from .signin import (
    IdentityProvider,
    LtiIdentity,
    LtiLaunchState,
    LtiPlatform,
    SamlAssertionUse,
    SsoIdentity,
)

__all__ = [
    "ALLOWED_JWT_ALGORITHMS",
    "REGISTERED_JWT_CLAIMS",
    "AdminProfile",
    "ApiKey",
    "AuditEvent",
    "BudgetAlert",
    "Colleague",
    "Course",
    "CourseMember",
    "CourseTeacher",
    "CourseWindow",
    "EndUser",
    "IdentityProvider",
    "Institution",
    "JwtIssuer",
    "License",
    "LicenseType",
    "LtiIdentity",
    "LtiLaunchState",
    "LtiPlatform",
    "Outcome",
    "SafeguardingAlert",
    "SafeguardingSettings",
    "SamlAssertionUse",
    "ScimGroup",
    "ScimToken",
    "ScimUser",
    "SsoIdentity",
    "Transaction",
    "Reservation",
    "Wallet",
    "alert_at",
    "default_policy",
]
