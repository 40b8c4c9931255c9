"""A fake of the Gemini API (Generative Language, ``v1beta``).

Served under ``<origin>/v1beta``; the key goes in ``x-goog-api-key`` (or
``?key=``). Errors are Google's ``{"error": {"code", "message", "status"}}``.

Routes are ``POST /v1beta/models/{model}:{method}``:

- ``:predict`` for Imagen models;
- ``:generateContent`` for ``gemini-2.5-flash-image`` (text + image parts) and
  the chat models (``gemini_chat``: tools, structured output, thinking), whose
  ``:streamGenerateContent?alt=sse`` streams the same answer;
- ``:embedContent`` / ``:batchEmbedContents`` for embedding models. Gemini's
  embedding answers carry no token counts at all (no ``usageMetadata``), so
  a gateway that bills them has to count the input itself;
- ``:countTokens`` for the generateContent models and ``gemini-embedding-001``
  (``{"totalTokens"}``, the fakes' one-token-per-word count of every part).

``gemini-2.5-flash-image`` makes one image per call: ``candidateCount`` other
than 1 is the real API's 400 "Multiple candidates is not enabled".

A prompt containing the word "forbidden" is blocked:

- Imagen: with ``parameters.includeRaiReason`` true, each prediction is only
  ``{"raiFilteredReason": ...}``; without it the answer is ``{}`` (no
  ``predictions`` key at all). ``imagen_block_mode = "reject"`` instead gives
  the 400 INVALID_ARGUMENT that the prompt pre-filter answers with.
- Image generateContent: ``image_block_mode = "image_safety"`` (default) gives
  a candidate with ``finishReason: "IMAGE_SAFETY"`` and no content;
  ``"prompt_blocked"`` gives ``promptFeedback.blockReason: "SAFETY"`` and no
  candidates.

Image output is billed by the real API at 1290 tokens per image; the fake
reports the same in ``candidatesTokenCount``.
"""

from __future__ import annotations

import base64
from typing import Any

from . import agentic, gemini_chat, png, synth
from .server import FakeUpstream, RecordedRequest, Response, json_response, sse_data, sse_response

IMAGEN_MODELS = {
    "imagen-4.0-generate-001",
    "imagen-4.0-fast-generate-001",
    "imagen-4.0-ultra-generate-001",
    "imagen-3.0-generate-002",
}
IMAGE_CHAT_MODELS = {"gemini-2.5-flash-image", "gemini-2.5-flash-image-preview"}
TEXT_CHAT_MODELS = {
    "gemini-2.5-flash",
    "gemini-2.5-pro",
    "gemini-2.0-flash",
    "gemini-3-pro-preview",
}
EMBED_MODELS = {"gemini-embedding-001": 3072, "text-embedding-004": 768}
METHODS = {
    "predict": IMAGEN_MODELS,
    "generateContent": IMAGE_CHAT_MODELS | TEXT_CHAT_MODELS,
    "streamGenerateContent": TEXT_CHAT_MODELS,
    "embedContent": set(EMBED_MODELS),
    "batchEmbedContents": set(EMBED_MODELS),
    # ListModels shows countTokens on gemini-embedding-001 but not on text-embedding-004.
    "countTokens": IMAGE_CHAT_MODELS | TEXT_CHAT_MODELS | {"gemini-embedding-001"},
}

IMAGE_TOKENS = 1290
IMAGEN_ASPECTS = ("1:1", "3:4", "4:3", "9:16", "16:9")
IMAGE_ASPECTS = ("1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9")
TASK_TYPES = (
    "TASK_TYPE_UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
)
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
DEFAULT_MESSAGES = {
    400: "Request contains an invalid argument.",
    403: "The caller does not have permission",
    404: "Requested entity was not found.",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
    504: "Deadline expired before operation could complete.",
}
RAI_FILTERED = (
    "Unable to show generated images. All images were filtered out because they violated "
    "Vertex AI's usage guidelines. You will not be charged for blocked images. Try rephrasing "
    "the prompt. If you think this was an error, send feedback. Support codes: 29310472"
)
PROMPT_REJECTED = (
    "Image generation failed with the following error: The prompt could not be submitted. "
    "This prompt contains sensitive words that violate Google's Responsible AI practices. Try "
    "rephrasing the prompt. If you think this was an error, send feedback. Support codes: 42876398"
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _prompt(contents: list, body: dict) -> tuple[str, int]:
    """The last user turn's text (the last turn's when none is the user's), and the tokens of
    every turn and the system instruction."""
    texts = [_parts_text(c) for c in contents]
    users = [
        _parts_text(c) for c in contents if isinstance(c, dict) and c.get("role", "user") == "user"
    ]
    prompt = users[-1] if users else texts[-1]
    prompt_tokens = sum(synth.count_tokens(t) for t in texts)
    if isinstance(body.get("systemInstruction"), dict):
        prompt_tokens += synth.count_tokens(_parts_text(body["systemInstruction"]))
    return prompt, prompt_tokens


def _parts_text(content: Any) -> str:
    if not isinstance(content, dict):
        return ""
    return " ".join(
        part["text"]
        for part in content.get("parts") or []
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    )


class GeminiFake(FakeUpstream):
    """Gemini API simulator.

    Args:
        api_key: the only accepted key; None accepts any (or none).

    Knobs: ``reply_text`` (text part of generateContent answers),
    ``imagen_block_mode`` ("filter" | "reject"), ``image_block_mode``
    ("image_safety" | "prompt_blocked"), the chat models' ``chat_block_mode``
    ("safety" | "prompt_blocked"), ``parallel_calls`` and ``cached_tokens``
    (``gemini_chat``), plus the latency and stream knobs of :class:`FakeUpstream`
    (``stream_fail_mode = "error_event"`` sends Google's error object as an event).
    """

    name = "gemini"
    base_path = "/v1beta"
    ROUTES = [("POST", r"/v1beta/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)", "model_call")]
    KNOBS = {
        "reply_text": None,
        "imagen_block_mode": "filter",
        "image_block_mode": "image_safety",
        "chat_block_mode": "safety",
        "parallel_calls": False,
        "cached_tokens": 0,
    }

    def __init__(self, api_key: str | None = None):
        super().__init__()
        self.api_key = api_key

    # -- protocol hooks ----------------------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        error: dict[str, Any] = {
            "code": status,
            "message": message or DEFAULT_MESSAGES.get(status, "Unknown error."),
            "status": STATUS_NAMES.get(status, "UNKNOWN"),
        }
        if extra.get("details"):
            error["details"] = extra["details"]
        return json_response({"error": error}, status)

    def invalid_json(self, request: RecordedRequest) -> Response:
        return self.error(400, "Invalid JSON payload received. Unexpected token.")

    def not_found(self, request: RecordedRequest) -> Response:
        return self.error(404, f"Method not found: {request.method} {request.path}")

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_key is None:
            return None
        key = request.headers.get("x-goog-api-key") or request.query.get("key")
        if not key:
            return self.error(
                403,
                "Method doesn't allow unregistered callers (callers without established identity). "
                "Please use API Key or other form of API consumer identity to call this API.",
            )
        if key != self.api_key:
            # Google answers a wrong key with 400, not 401.
            return self.error(
                400,
                "API key not valid. Please pass a valid API key.",
                details=[
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                        "metadata": {"service": "generativelanguage.googleapis.com"},
                    }
                ],
            )
        return None

    # -- dispatch ----------------------------------------------------------------------

    def model_call(self, request: RecordedRequest, model: str, method: str) -> Response:
        if model not in METHODS.get(method, ()):
            raise self.fail(
                404,
                f"models/{model} is not found for API version v1beta, or is not supported for "
                f"{method}. Call ListModels to see the list of available models and their "
                "supported methods.",
            )
        body = self.body_json(request)
        if method == "streamGenerateContent":
            if request.query.get("alt") != "sse":
                raise self._invalid("The fake streams with alt=sse only.")
            return self._stream_chat(model, body)
        if method == "generateContent" and model in TEXT_CHAT_MODELS:
            return json_response(self._chat(model, body))
        handler = {
            "predict": self._predict,
            "generateContent": self._generate_content,
            "embedContent": self._embed_content,
            "batchEmbedContents": self._batch_embed_contents,
            "countTokens": self._count_tokens,
        }[method]
        return handler(model, body)

    def _invalid(self, message: str):
        return self.fail(400, message)

    # -- :predict (Imagen) -------------------------------------------------------------

    def _predict(self, model: str, body: dict) -> Response:
        instances = body.get("instances")
        if not isinstance(instances, list) or not instances or not isinstance(instances[0], dict):
            raise self._invalid("* PredictRequest.instances: instances is not specified\n")
        prompt = instances[0].get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise self._invalid("Imagen prompt is required.")
        params = body.get("parameters") or {}
        count = params.get("sampleCount", 4)  # the real default is 4 images
        if not isinstance(count, int) or not 1 <= count <= 4:
            raise self._invalid(f"sampleCount must be between 1 and 4, got {count}.")
        aspect = params.get("aspectRatio", "1:1")
        if aspect not in IMAGEN_ASPECTS:
            raise self._invalid(f"Aspect ratio {aspect} is not supported.")
        if params.get("sampleImageSize") not in (None, "1K", "2K"):
            raise self._invalid(f"Image size {params['sampleImageSize']} is not supported.")
        person = params.get("personGeneration")
        if person not in (None, "dont_allow", "allow_adult", "allow_all"):
            raise self._invalid(f"personGeneration {person} is not supported.")
        if synth.has_word(prompt, "forbidden"):
            if self.imagen_block_mode == "reject":
                raise self._invalid(PROMPT_REJECTED)
            if params.get("includeRaiReason"):
                return json_response({"predictions": [{"raiFilteredReason": RAI_FILTERED}]})
            return json_response({})
        size = png.aspect_size(aspect)
        predictions = [
            {
                "bytesBase64Encoded": _b64(png.make_png(*size, seed=f"{model}|{prompt}|{i}")),
                "mimeType": "image/png",
            }
            for i in range(count)
        ]
        return json_response({"predictions": predictions})

    # -- :generateContent --------------------------------------------------------------

    def _generate_content(self, model: str, body: dict) -> Response:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise self._invalid("* GenerateContentRequest.contents: contents is not specified\n")
        prompt, prompt_tokens = _prompt(contents, body)
        modalities, aspect = self._output_settings(model, body.get("generationConfig") or {})
        prompt_usage = {
            "promptTokenCount": prompt_tokens,
            "totalTokenCount": prompt_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt_tokens}],
        }
        envelope = {"modelVersion": model, "responseId": synth.random_id("", 22)}
        if model in IMAGE_CHAT_MODELS and synth.has_word(prompt, "forbidden"):
            return self._blocked_image(prompt_usage, envelope)
        parts, details, candidates_tokens = self._reply_parts(model, prompt, modalities, aspect)
        usage = {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": candidates_tokens,
            "totalTokenCount": prompt_tokens + candidates_tokens,
            "promptTokensDetails": prompt_usage["promptTokensDetails"],
            "candidatesTokensDetails": details,
        }
        candidate = {
            "content": {"parts": parts, "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
        return json_response({"candidates": [candidate], "usageMetadata": usage, **envelope})

    def _output_settings(self, model: str, config: dict) -> tuple[list[str], str]:
        """The response modalities and the aspect ratio asked for, refused as Gemini does."""
        image_model = model in IMAGE_CHAT_MODELS
        default_modalities = ["TEXT", "IMAGE"] if image_model else ["TEXT"]
        modalities = [
            str(m).upper() for m in config.get("responseModalities") or default_modalities
        ]
        if "IMAGE" in modalities and not image_model:
            raise self._invalid("Model does not support the requested response modalities: image")
        if image_model and config.get("candidateCount", 1) != 1:
            raise self._invalid(f"Multiple candidates is not enabled for models/{model}")
        aspect = (config.get("imageConfig") or {}).get("aspectRatio", "1:1")
        if aspect not in IMAGE_ASPECTS:
            raise self._invalid(f"Unsupported aspect ratio: {aspect}")
        return modalities, aspect

    def _blocked_image(self, prompt_usage: dict, envelope: dict) -> Response:
        """An image model's refusal: the prompt blocked, or the candidate cut for safety."""
        if self.image_block_mode == "prompt_blocked":
            feedback = {
                "blockReason": "SAFETY",
                "safetyRatings": [
                    {
                        "category": "HARM_CATEGORY_DANGEROUS_CONTENT",
                        "probability": "HIGH",
                        "blocked": True,
                    }
                ],
            }
            return json_response(
                {"promptFeedback": feedback, "usageMetadata": prompt_usage, **envelope}
            )
        candidate = {"finishReason": "IMAGE_SAFETY", "index": 0}
        return json_response({"candidates": [candidate], "usageMetadata": prompt_usage, **envelope})

    def _reply_parts(
        self, model: str, prompt: str, modalities: list[str], aspect: str
    ) -> tuple[list[dict], list[dict], int]:
        """The reply's parts, their tokens by modality, and the candidates' token count."""
        image_model = model in IMAGE_CHAT_MODELS
        parts: list[dict] = []
        details = []
        text_tokens = 0
        if "TEXT" in modalities:
            if self.reply_text is not None:
                text = self.reply_text
            elif image_model:
                text = f"Here is the image you asked for: {prompt}"
            else:
                text = f"Echo: {prompt}"
            parts.append({"text": text})
            text_tokens = synth.count_tokens(text)
            details.append({"modality": "TEXT", "tokenCount": text_tokens})
        image_tokens = 0
        if "IMAGE" in modalities:
            image = png.make_png(*png.aspect_size(aspect), seed=f"{model}|{prompt}")
            parts.append({"inlineData": {"mimeType": "image/png", "data": _b64(image)}})
            image_tokens = IMAGE_TOKENS
            details.append({"modality": "IMAGE", "tokenCount": image_tokens})
        return parts, details, text_tokens + image_tokens

    # -- chat models: :generateContent and :streamGenerateContent -----------------------

    def _chat(self, model: str, body: dict) -> dict:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise self._invalid("* GenerateContentRequest.contents: contents is not specified\n")
        try:
            return gemini_chat.answer(
                model,
                body,
                reply_text=self.reply_text,
                parallel=self.parallel_calls,
                cached=self.cached_tokens,
                block=self.chat_block_mode,
            )
        except gemini_chat.Invalid as exc:
            raise self._invalid(str(exc)) from exc
        except agentic.UnknownTool as exc:
            raise self._invalid(
                f"* GenerateContentRequest.tool_config.function_calling_config.allowed_function_"
                f"names: function {exc.name} is not declared\n"
            ) from exc

    def _stream_chat(self, model: str, body: dict) -> Response:
        events = [sse_data(event) for event in gemini_chat.stream_events(self._chat(model, body))]
        error = {"error": {"code": 500, "message": DEFAULT_MESSAGES[500], "status": "INTERNAL"}}
        return sse_response(events, error_event=lambda _index: sse_data(error))

    # -- :countTokens -----------------------------------------------------------------

    def _count_tokens(self, model: str, body: dict) -> Response:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise self._invalid("* CountTokensRequest.contents: contents is not specified\n")
        total = sum(synth.count_tokens(_parts_text(c)) for c in contents)
        details = [{"modality": "TEXT", "tokenCount": total}]
        return json_response({"totalTokens": total, "promptTokensDetails": details})

    # -- :embedContent / :batchEmbedContents -------------------------------------------

    def _embed_values(self, model: str, request: dict, where: str) -> list[float]:
        text = _parts_text(request.get("content"))
        if not text:
            raise self._invalid(f"* {where}.content: contents is not specified\n")
        task = request.get("taskType") or "TASK_TYPE_UNSPECIFIED"
        if task not in TASK_TYPES:
            raise self._invalid(
                "Invalid value at 'task_type' "
                f'(type.googleapis.com/google.ai.generativelanguage.v1beta.TaskType), "{task}"'
            )
        native = EMBED_MODELS[model]
        dims = request.get("outputDimensionality")
        if dims is not None and (not isinstance(dims, int) or not 1 <= dims <= native):
            raise self._invalid(
                f"* {where}.output_dimensionality: must be between 1 and {native}\n"
            )
        # Task types give different vectors for the same text, as they do for real.
        values = synth.vector(text, native, salt=f"{model}|{task}")
        # Only the full-size vector is normalised; shortened ones are plain prefixes.
        return values[:dims] if dims else values

    def _embed_content(self, model: str, body: dict) -> Response:
        return json_response(
            {"embedding": {"values": self._embed_values(model, body, "EmbedContentRequest")}}
        )

    def _batch_embed_contents(self, model: str, body: dict) -> Response:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            raise self._invalid("* BatchEmbedContentsRequest.requests: requests is not specified\n")
        if len(requests) > 100:
            raise self._invalid(
                "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n"
            )
        embeddings = []
        for index, item in enumerate(requests):
            where = f"BatchEmbedContentsRequest.requests[{index}]"
            if not isinstance(item, dict) or not isinstance(item.get("model"), str):
                raise self._invalid(f"* {where}.model: unexpected model name format\n")
            if item["model"] != f"models/{model}":
                raise self._invalid(
                    f"Model name in {where} ('{item['model']}') does not match the model in the "
                    f"URL ('models/{model}')."
                )
            embeddings.append({"values": self._embed_values(model, item, where)})
        return json_response({"embeddings": embeddings})
