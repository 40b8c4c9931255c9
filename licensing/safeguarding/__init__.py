"""Safeguarding alerts (issue 39, docs/safeguarding.md): a student's message flagged by the
moderation guardrail raises an alert for the course's teachers and the institution's
safeguarding contacts, reviewed in the admin, mailed without content, deleted after the
institution's retention period."""
