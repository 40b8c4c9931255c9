"""A course's instructions (issue 39): the teacher's text that goes before every chat and
responses request of the course's members, on every provider, and that no client can remove.

The shapes are declared here once, as JSON, and read by the pipeline (inference's chat and
responses operations put them into the request) and by the "try a request" panel (which shows
the request as it will be sent):

- chat completions: a `system` message first, before the client's own messages. `system`
  rather than `developer`: every provider's adapter maps it (Anthropic's and Bedrock's `system`,
  Gemini's `systemInstruction`, OpenAI-compatible servers that know no `developer` role), and
  OpenAI's reasoning models take it as their developer message;
- responses: the request's `instructions`, the course's first and the client's after a blank
  line (the Responses API has one `instructions`; the bridge to chat-only providers makes it
  the system message).

They are put in after the policy and before the provider is chosen: the course's policy
judges what the client sent, the guardrails and moderation see the client's text (a teacher's
text never flags a student), and the provider is asked, and paid, for the whole request
(docs/decisions/course-instructions.md).
"""

from __future__ import annotations

from typing import Any

CHAT = "chat_completions"
RESPONSES = "responses"
SERVICES = (CHAT, RESPONSES)
ROLE = "system"


def system_message(text: str) -> dict[str, str]:
    """The message a chat completion gets first."""
    return {"role": ROLE, "content": text}


def joined(text: str, client_instructions: str | None) -> str:
    """A responses request's `instructions`: the course's, then the client's own."""
    return f"{text}\n\n{client_instructions}" if client_instructions else text


def instructed(service: str, body: Any, text: str) -> Any:
    """`body` (a request's JSON) as it is sent with the course's instructions `text`; as it is
    for another service, no instructions or a body that is not an object."""
    if not text or not isinstance(body, dict):
        return body
    if service == CHAT and isinstance(body.get("messages"), list):
        return {**body, "messages": [system_message(text), *body["messages"]]}
    if service == RESPONSES:
        prior = body.get("instructions")
        return {**body, "instructions": joined(text, prior if isinstance(prior, str) else None)}
    return body
