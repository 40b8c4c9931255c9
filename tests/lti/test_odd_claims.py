"""Issue 35 item 10 for LTI launches: a signed id_token whose times are not finite numbers
(`exp: 1e400` never expires, `NaN` passes every comparison), whose `exp` is years ahead, whose
`nbf` is in the future or whose `email` is not one address is refused like every other bad
launch token (the page, the audit row, no session); licensing/signin/claims.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fake_upstreams.lti import INSTRUCTOR
from licensing.models import Course

from .conftest import launch
from .test_launch import assert_refused

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"exp": "1e400"}, "invalid_exp"),
        ({"exp": "NaN"}, "invalid_exp"),
        ({"exp": str(10**30)}, "invalid_exp"),
        ({"exp": "4102444800"}, "invalid_exp"),
        ({"exp": "true"}, "invalid_exp"),
        ({"iat": "-Infinity"}, "invalid_iat"),
        ({"iat": "[0]"}, "invalid_iat"),
        ({"nbf": "NaN"}, "invalid_nbf"),
        ({"nbf": "4102444800"}, "invalid_nbf"),
        ({"email": '["t@alpha.example.edu"]'}, "invalid_email"),
        ({"email": '{"a": "t@alpha.example.edu"}'}, "invalid_email"),
        ({"email": "7"}, "invalid_email"),
    ],
)
def test_odd_claims_are_refused(world, browser, raw, reason):
    response = launch(browser, world.fake, "t-1", roles=INSTRUCTOR, raw=raw)
    assert_refused(response, 403, reason, browser)
    assert not Course.objects.exists() and not User.objects.exists()


def test_sane_claims_with_nbf_still_launch(world, browser):
    now = int(world.fake.clock())
    response = launch(
        browser,
        world.fake,
        "t-2",
        roles=INSTRUCTOR,
        raw={"nbf": str(now - 5), "exp": f"{now + 60}.25", "email": '"t2@alpha.example.edu"'},
    )
    assert response.status_code == 302, response.content[:800]
    assert User.objects.get().email == "t2@alpha.example.edu"
