"""A fake of the AWS Bedrock Runtime ``InvokeModel``, ``Converse`` and ``ConverseStream`` APIs.

Served at ``<origin>`` (``POST /model/{modelId}/invoke``, the model id
URL-encoded as AWS SDKs send it). When built with credentials the fake checks
the SigV4 signature by recomputing it with botocore from what it received, so
a gateway that signs the wrong bytes, host, region or service fails here as it
would against AWS. Errors are ``{"message": ...}`` with the exception name in
``x-amzn-ErrorType``, which is where botocore reads the error code from.

Model bodies follow the provider formats Bedrock passes through: Titan Image /
Nova Canvas, Stability (Core, Ultra, SD3.5), Titan Text Embeddings (v1, v2)
and Cohere Embed v3. A prompt containing the word "forbidden" trips the
content filter in the way each model family reports it:

- Titan / Nova Canvas: 400 ``ValidationException`` "This request has been
  blocked by our content filters."
- Stability: 200 with ``{"finish_reasons": ["Filter reason: prompt"]}`` and
  nothing else, the filtered-response example in the Bedrock user guide.
- Converse: 200 with ``stopReason: content_filtered`` and a short refusal text.

Chat (``POST /model/{modelId}/converse`` and ``/converse-stream``, the latter a binary event
stream) is :mod:`fake_upstreams.converse`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hmac
import re
import uuid
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from . import agentic, png, synth
from . import converse as chat
from .server import FakeUpstream, RecordedRequest, Response, json_response

BEDROCK_FAULT = "http://internal.amazon.com/coral/com.amazon.bedrock/"
AUTH_FAULT = "http://internal.amazon.com/coral/com.amazon.coral.service/"

TITAN_IMAGE_MODELS = {
    "amazon.titan-image-generator-v2:0": 512,  # max prompt length
    "amazon.titan-image-generator-v1": 512,
    "amazon.nova-canvas-v1:0": 1024,
}
STABILITY_MODELS = {
    "stability.stable-image-core-v1:0",
    "stability.stable-image-core-v1:1",
    "stability.stable-image-ultra-v1:0",
    "stability.stable-image-ultra-v1:1",
    "stability.sd3-5-large-v1:0",
    "stability.sd3-large-v1:0",
}
TITAN_EMBED_MODELS = {
    "amazon.titan-embed-text-v2:0": 1024,
    "amazon.titan-embed-text-v1": 1536,
    "amazon.titan-embed-text-v1:2": 1536,
}
COHERE_EMBED_MODELS = {"cohere.embed-english-v3": 1024, "cohere.embed-multilingual-v3": 1024}

STABILITY_ASPECTS = ("16:9", "1:1", "21:9", "2:3", "3:2", "4:5", "5:4", "9:16", "9:21")
COHERE_INPUT_TYPES = ("search_document", "search_query", "classification", "clustering")
COHERE_EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary")
# Cross-region inference profiles put a geography in front of the model id.
PROFILE_PREFIXES = ("us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au.", "ca.")

DEFAULT_ERRORS = {
    400: (
        "ValidationException",
        "Malformed input request, please reformat your input and try again.",
    ),
    403: (
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ),
    404: ("ResourceNotFoundException", "The requested resource could not be found."),
    408: (
        "ModelTimeoutException",
        "Model has timed out in processing the request. Try your request again.",
    ),
    424: ("ModelErrorException", "The model encountered an error processing your request."),
    429: ("ThrottlingException", "Too many requests, please wait before trying again."),
    500: (
        "InternalServerException",
        "The system encountered an unexpected error during processing. Try your request again.",
    ),
    503: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
}
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details."
)
CONTENT_FILTERED = "This request has been blocked by our content filters."
AUTH_HEADER = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*"
    r"SignedHeaders=(?P<signed>[^,\s]+),\s*Signature=(?P<signature>[0-9a-fA-F]+)\s*$"
)
AMZ_DATE = "%Y%m%dT%H%M%SZ"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def base_model_id(model_id: str) -> str:
    """The foundation model behind an ARN or an inference-profile id."""
    if model_id.startswith("arn:"):
        model_id = model_id.rsplit("/", 1)[-1]
    for prefix in PROFILE_PREFIXES:
        if model_id.startswith(prefix):
            return model_id[len(prefix) :]
    return model_id


class BedrockFake(FakeUpstream):
    """Bedrock Runtime simulator.

    Args:
        access_key, secret_key: the credentials requests must be signed with;
            with ``access_key=None`` signatures are not checked at all.
        region: the region the credential scope must name (service ``bedrock``).
        session_token: when set, ``x-amz-security-token`` must carry it.

    Knobs: ``denied_models`` (model ids answered with 403
    AccessDeniedException, like a model not enabled in the account),
    ``max_clock_skew`` (seconds between ``x-amz-date`` and now before AWS
    calls the signature expired; None disables the check), and for chat:
    ``reply_text`` (instead of ``Echo: <last user text>``),
    ``cache_read_tokens`` / ``cache_write_tokens`` (prompt tokens reported
    as read from / written to the prompt cache), ``parallel_calls`` (call
    every offered tool at once; a ``cachePoint`` after the system prompt
    writes it to the cache the first time and reads it after),
    ``stream_pieces``, ``stream_exception`` (the exception frame
    ``stream_fail_mode="error_event"`` sends), plus the stream and latency
    knobs of :class:`FakeUpstream`. ``usage_reported`` lists the usage of
    each Converse answer, in order.

    ``last_signature_valid`` is True/False for the last signed request
    checked, None while none was.
    """

    name = "bedrock"
    base_path = ""
    ROUTES = [
        ("POST", r"/model/(?P<model_id>.+)/invoke", "invoke"),
        ("POST", r"/model/(?P<model_id>.+)/converse", "converse"),
        ("POST", r"/model/(?P<model_id>.+)/converse-stream", "converse_stream"),
    ]
    KNOBS = {
        "denied_models": set(),
        "max_clock_skew": 300,
        "reply_text": None,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "parallel_calls": False,
        "stream_pieces": 4,
        "stream_exception": "modelStreamErrorException",
    }

    def __init__(
        self,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = "us-east-1",
        session_token: str | None = None,
    ):
        super().__init__()
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.session_token = session_token
        self.last_signature_valid: bool | None = None
        self.prompt_cache: set[str] = set()  # system-prompt prefixes written to the cache
        self.usage_reported: list[dict] = []

    def _reset_state(self) -> None:
        self.last_signature_valid = None
        self.prompt_cache = set()
        self.usage_reported = []

    # -- protocol hooks ----------------------------------------------------------------

    def error(
        self,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        fault: str = BEDROCK_FAULT,
        **extra: Any,
    ) -> Response:
        default_type, default_message = DEFAULT_ERRORS.get(
            status, ("InternalServerException" if status >= 500 else "ValidationException", "Error")
        )
        return json_response(
            {"message": message or default_message},
            status,
            [("x-amzn-ErrorType", f"{error_type or default_type}:{fault}")],
        )

    def invalid_json(self, request: RecordedRequest) -> Response:
        return self.error(400)

    def not_found(self, request: RecordedRequest) -> Response:
        return self.error(404, "Unknown operation", error_type="UnknownOperationException")

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        return [("x-amzn-RequestId", str(uuid.uuid4()))]

    # -- SigV4 -------------------------------------------------------------------------

    def _auth_error(self, error_type: str, message: str, status: int = 403) -> Response:
        return self.error(status, message, error_type=error_type, fault=AUTH_FAULT)

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.access_key is None:
            return None
        denied = self._check_signature(request)
        self.last_signature_valid = denied is None
        return denied

    def _check_signature(self, request: RecordedRequest) -> Response | None:
        header = request.headers.get("authorization")
        if not header:
            return self._auth_error(
                "MissingAuthenticationTokenException", "Missing Authentication Token"
            )
        match = AUTH_HEADER.match(header)
        scope = match["credential"].split("/") if match else []
        if not match or len(scope) != 5 or scope[4] != "aws4_request":
            return self._auth_error(
                "IncompleteSignatureException",
                "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' "
                f"parameters in AWS4-HMAC-SHA256 form. Authorization={header}",
            )
        # AWS's order of checks: who signed, then when and for what, then the signature.
        amz_date = request.headers.get("x-amz-date", "")
        denied = self._check_credential(request, scope[0])
        if denied is None:
            denied = self._check_scope(header, scope, amz_date)
        if denied is None:
            denied = self._check_digest(request, match, amz_date)
        return denied

    def _check_credential(self, request: RecordedRequest, access_key: str) -> Response | None:
        if access_key != self.access_key:
            return self._auth_error(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        if (
            self.session_token is not None
            and request.headers.get("x-amz-security-token") != self.session_token
        ):
            return self._auth_error(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        return None

    def _check_scope(self, header: str, scope: list[str], amz_date: str) -> Response | None:
        """The request's date, and the credential's day, region and service."""
        _, day, region, service, _ = scope
        try:
            signed_at = dt.datetime.strptime(amz_date, AMZ_DATE).replace(tzinfo=dt.UTC)
        except ValueError:
            return self._auth_error(
                "IncompleteSignatureException",
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' "
                f"header. Authorization={header}",
            )
        if region != self.region:
            return self._auth_error(
                "InvalidSignatureException", "Credential should be scoped to a valid region. "
            )
        if service != "bedrock":
            return self._auth_error(
                "InvalidSignatureException",
                "Credential should be scoped to correct service: 'bedrock'. ",
            )
        if day != amz_date[:8]:
            return self._auth_error(
                "InvalidSignatureException",
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
                f"from HTTP: '{day}' != '{amz_date[:8]}', from '{amz_date}'.",
            )
        return self._check_skew(signed_at, amz_date)

    def _check_skew(self, signed_at: dt.datetime, amz_date: str) -> Response | None:
        skew = self.max_clock_skew
        now = dt.datetime.now(dt.UTC)
        if skew is not None and abs((now - signed_at).total_seconds()) > skew:
            limit = (now - dt.timedelta(seconds=skew)).strftime(AMZ_DATE)
            return self._auth_error(
                "InvalidSignatureException",
                f"Signature expired: {amz_date} is now earlier than {limit} "
                f"({now.strftime(AMZ_DATE)} - {skew // 60} min.)",
            )
        return None

    def _check_digest(
        self, request: RecordedRequest, match: re.Match[str], amz_date: str
    ) -> Response | None:
        canonical, string_to_sign, expected = self._expected_signature(
            request, match["signed"], amz_date
        )
        if not hmac.compare_digest(expected, match["signature"].lower()):
            # AWS prints what it signed, which is what makes these errors debuggable.
            return self._auth_error(
                "InvalidSignatureException",
                f"{SIGNATURE_MISMATCH}\n\nThe Canonical String for this request should have been\n"
                f"'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n",
            )
        return None

    def _expected_signature(
        self, request: RecordedRequest, signed: str, amz_date: str
    ) -> tuple[str, str, str]:
        names = [name for name in signed.lower().split(";") if name]
        headers = {name: request.headers.get(name, "") for name in names}
        url = f"{self.origin}{request.raw_path}"
        if request.query_string:
            url += f"?{request.query_string}"
        aws_request = AWSRequest(method=request.method, url=url, data=request.body, headers=headers)
        aws_request.context["timestamp"] = amz_date
        signer = SigV4Auth(
            Credentials(self.access_key, self.secret_key, self.session_token),
            "bedrock",
            self.region,
        )
        canonical = signer.canonical_request(aws_request)
        string_to_sign = signer.string_to_sign(aws_request, canonical)
        return canonical, string_to_sign, signer.signature(string_to_sign, aws_request)

    # -- InvokeModel -------------------------------------------------------------------

    def _malformed(self, detail: str):
        return self.fail(
            400, f"Malformed input request: {detail}, please reformat your input and try again."
        )

    def invoke(self, request: RecordedRequest, model_id: str) -> Response:
        if model_id in self.denied_models:
            raise self.fail(403, error_type="AccessDeniedException")
        model = base_model_id(model_id)
        if model in TITAN_IMAGE_MODELS:
            handler = self._titan_image
        elif model in STABILITY_MODELS:
            handler = self._stability_image
        elif model in TITAN_EMBED_MODELS:
            handler = self._titan_embed
        elif model in COHERE_EMBED_MODELS:
            handler = self._cohere_embed
        else:
            raise self.fail(400, "The provided model identifier is invalid.")
        body = self.body_json(request)
        response = handler(model, body)
        response.headers.append(("X-Amzn-Bedrock-Invocation-Latency", "42"))
        return response

    # -- Converse ----------------------------------------------------------------------

    def _reply(self, request: RecordedRequest, model_id: str) -> chat.Reply:
        if model_id in self.denied_models:
            raise self.fail(403, error_type="AccessDeniedException")
        model = base_model_id(model_id)
        if model not in chat.CHAT_MODELS:
            raise self.fail(400, "The provided model identifier is invalid.")
        knobs = chat.Knobs(
            self.reply_text, self.cache_read_tokens, self.cache_write_tokens, self.parallel_calls
        )
        try:
            reply = chat.converse_reply(self.body_json(request), model, knobs, self.prompt_cache)
        except chat.Invalid as exc:
            raise self.fail(400, str(exc)) from None
        except agentic.UnknownTool as exc:
            raise self.fail(
                400, f"The tool {exc.name} in toolChoice is not in toolConfig.tools."
            ) from None
        self.usage_reported.append(reply.usage())
        return reply

    def converse(self, request: RecordedRequest, model_id: str) -> Response:
        return json_response(chat.converse_answer(self._reply(request, model_id)))

    def converse_stream(self, request: RecordedRequest, model_id: str) -> Response:
        reply = self._reply(request, model_id)
        exception = self.stream_exception
        return Response(
            200,
            headers=[("content-type", "application/vnd.amazon.eventstream")],
            events=chat.stream_frames(reply, self.stream_pieces),
            error_event=lambda _i: chat.exception_frame(exception, chat.STREAM_ERROR),
        )

    # -- image models ------------------------------------------------------------------

    def _titan_image(self, model: str, body: dict) -> Response:
        task = body.get("taskType")
        if task is None:
            raise self._malformed("#: required key [taskType] not found")
        if task != "TEXT_IMAGE":
            raise self._malformed(f"#/taskType: {task} is not a valid enum value")
        params = body.get("textToImageParams")
        if not isinstance(params, dict):
            raise self._malformed("#: required key [textToImageParams] not found")
        text = params.get("text")
        if not isinstance(text, str):
            raise self._malformed("#/textToImageParams: required key [text] not found")
        max_length = TITAN_IMAGE_MODELS[model]
        if not 1 <= len(text) <= max_length:
            bound = "minLength: 1" if not text else f"maxLength: {max_length}"
            raise self._malformed(
                f"#/textToImageParams/text: expected {bound}, actual: {len(text)}"
            )
        config = body.get("imageGenerationConfig") or {}
        count = config.get("numberOfImages", 1)
        if not isinstance(count, int) or not 1 <= count <= 5:
            raise self._malformed(
                f"#/imageGenerationConfig/numberOfImages: {count} is not less or equal to 5"
            )
        quality = config.get("quality", "standard")
        if quality not in ("standard", "premium"):
            raise self._malformed(
                f"#/imageGenerationConfig/quality: {quality} is not a valid enum value"
            )
        width, height = config.get("width", 1024), config.get("height", 1024)
        if synth.has_word(text, "forbidden"):
            raise self.fail(400, CONTENT_FILTERED)
        seed = config.get("seed", 0)
        size = png.thumbnail_size(width, height)
        images = [
            _b64(png.make_png(*size, seed=f"{model}|{text}|{seed}|{i}")) for i in range(count)
        ]
        return json_response({"images": images, "error": None})

    def _stability_image(self, model: str, body: dict) -> Response:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise self._malformed("#: required key [prompt] not found")
        aspect = body.get("aspect_ratio", "1:1")
        if aspect not in STABILITY_ASPECTS:
            raise self._malformed(f"#/aspect_ratio: {aspect} is not a valid enum value")
        output_format = body.get("output_format", "png")
        if output_format not in ("png", "jpeg", "webp"):
            raise self._malformed(f"#/output_format: {output_format} is not a valid enum value")
        seed = body.get("seed") or synth.stable_int(f"{model}|{prompt}") % 4294967295
        if synth.has_word(prompt, "forbidden"):
            return json_response({"finish_reasons": ["Filter reason: prompt"]})
        image = png.make_png(*png.aspect_size(aspect), seed=f"{model}|{prompt}|{seed}")
        return json_response({"seeds": [seed], "finish_reasons": [None], "images": [_b64(image)]})

    # -- embedding models --------------------------------------------------------------

    def _titan_embed(self, model: str, body: dict) -> Response:
        text = body.get("inputText")
        if not isinstance(text, str):
            raise self._malformed("#: required key [inputText] not found")
        if not text:
            raise self._malformed("#/inputText: expected minLength: 1, actual: 0")
        tokens = synth.count_tokens(text)
        headers = [("X-Amzn-Bedrock-Input-Token-Count", str(tokens))]
        if not model.startswith("amazon.titan-embed-text-v2"):
            extra = sorted(set(body) - {"inputText"})
            if extra:
                raise self._malformed(f"extraneous key [{extra[0]}] is not permitted")
            values = synth.vector(text, TITAN_EMBED_MODELS[model], salt=model)
            return json_response(
                {"embedding": values, "inputTextTokenCount": tokens}, headers=headers
            )
        dims = body.get("dimensions", 1024)
        if dims not in (256, 512, 1024):
            raise self._malformed(f"#/dimensions: {dims} is not a valid enum value")
        types = body.get("embeddingTypes", ["float"])
        if (
            not isinstance(types, list)
            or not types
            or any(t not in ("float", "binary") for t in types)
        ):
            raise self._malformed(f"#/embeddingTypes: {types} is not a valid enum value")
        if body.get("normalize", True):
            values = synth.vector(text, dims, salt=f"{model}|{dims}")
        else:
            raw = synth.vector(text, dims, salt=f"{model}|{dims}", normalize=False)
            values = [round(v * 0.05, 8) for v in raw]
        by_type: dict[str, list] = {}
        if "float" in types:
            by_type["float"] = values
        if "binary" in types:
            by_type["binary"] = [1 if v > 0 else 0 for v in values]
        return json_response(
            {"embedding": values, "embeddingsByType": by_type, "inputTextTokenCount": tokens},
            headers=headers,
        )

    def _cohere_embed(self, model: str, body: dict) -> Response:
        texts = body.get("texts")
        if texts is None:
            raise self._malformed("#: required key [texts] not found")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise self._malformed("#/texts: expected type: JSONArray of strings")
        if not 1 <= len(texts) <= 96:
            bound = "minimum item count: 1" if not texts else "maximum item count: 96"
            raise self._malformed(f"#/texts: expected {bound}, found: {len(texts)}")
        input_type = body.get("input_type")
        if input_type is None:
            raise self._malformed("#: required key [input_type] not found")
        if input_type not in COHERE_INPUT_TYPES:
            raise self._malformed(f"#/input_type: {input_type} is not a valid enum value")
        truncate = body.get("truncate", "NONE")
        if truncate not in ("NONE", "START", "END"):
            raise self._malformed(f"#/truncate: {truncate} is not a valid enum value")
        types = body.get("embedding_types")
        if types is not None and (
            not isinstance(types, list) or any(t not in COHERE_EMBEDDING_TYPES for t in types)
        ):
            raise self._malformed(f"#/embedding_types: {types} is not a valid enum value")
        dims = COHERE_EMBED_MODELS[model]
        vectors = [synth.vector(text, dims, salt=model) for text in texts]
        tokens = sum(synth.count_tokens(t) for t in texts)
        answer: dict[str, Any] = {"id": str(uuid.uuid4()), "texts": texts}
        if types:
            answer["response_type"] = "embeddings_by_type"
            answer["embeddings"] = {
                kind: [_cohere_encode(v, kind) for v in vectors] for kind in types
            }
        else:
            answer["response_type"] = "embeddings_floats"
            answer["embeddings"] = vectors
        return json_response(answer, headers=[("X-Amzn-Bedrock-Input-Token-Count", str(tokens))])


def _cohere_encode(values: list[float], kind: str) -> list:
    if kind == "float":
        return values
    # Unit vectors have small components; scale before quantising so the ints vary.
    scale = 127 / (max(abs(v) for v in values) or 1.0)
    if kind == "int8":
        return [max(-128, min(127, round(v * scale))) for v in values]
    if kind == "uint8":
        return [max(0, min(255, round(v * scale) + 128)) for v in values]
    bits = [1 if v > 0 else 0 for v in values]
    packed = [int("".join(map(str, bits[i : i + 8])), 2) for i in range(0, len(bits), 8)]
    return packed if kind == "ubinary" else [b - 128 for b in packed]
