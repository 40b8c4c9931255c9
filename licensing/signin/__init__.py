"""Sign-in (docs/sso.md, docs/lti.md): single sign-on with an institution's OpenID Connect
provider and LTI 1.3 launches from its LMS. Its own layers, top down: the views (`sso_views`,
`lti_views`) and the admin pages (`admin_sso`, `admin_lti`) > `backends` (the admin's password
backend, refusing an SSO-only institution's users) > `sso` (who signs in and as what), `lti`
(launches) > `oidc` (the provider's protocol) > `claims` (the id_token checks both share)."""
