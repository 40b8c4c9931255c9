"""Who is calling: API keys and JWTs (credentials, jwks), institution scoping, the services that
create licenses and keys."""
