"""SCIM 2.0 provisioning (docs/scim.md): an institution's identity provider (Entra ID, Okta)
pushes its users and groups to /scim/v2/ with the institution's bearer token. The wire format is
scim2-models' (wire.py); the reads are selectors.py, the writes services.py, the HTTP views.py."""
