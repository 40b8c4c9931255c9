"""Pure rules, no ORM models: the policy document, its schema checks, guardrails, fair use."""
