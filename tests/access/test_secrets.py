"""Secrets at rest: provider credentials and JWT HS256 secrets are Fernet tokens in the database,
decrypted once per cache build; rotation; a wrong or missing key is a clear error, never a leak."""

from __future__ import annotations

import logging
import stat
import time
from io import StringIO

import jwt
import openai
import pytest
from cryptography.fernet import Fernet
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings

from catalog.models import Connection
from catalog.services import connection_configure
from core.crypto import (
    EncryptionKeyError,
    Sealed,
    UndecryptableSecret,
    decrypt,
    keyring,
    reset_keyring,
    reveal,
)
from core.localcache import clear_all
from licensing.models import Institution, JwtIssuer

from ..conftest import AWS_SECRET_KEY, UPSTREAM_KEY

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
HS_SECRET = "hs-secret-for-the-at-rest-tests-0123456789"


def raw(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def set_raw(table: str, column: str, pk: int, value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s", [value, pk])


@pytest.fixture
def keys():
    """Switch GATEWAY_ENCRYPTION_KEYS for the test (the live gateway shares the process)."""
    overrides = []

    def use(*keys):
        if overrides:
            overrides.pop().disable()
        override = override_settings(GATEWAY_ENCRYPTION_KEYS=list(keys))
        override.enable()
        overrides.append(override)
        clear_all()

    yield use
    if overrides:
        overrides.pop().disable()
    clear_all()


@pytest.fixture
def gateway_log():
    """What the `gateway` logger writes (it does not propagate to caplog's root handler)."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def make_issuer(license):
    return JwtIssuer.objects.create(
        institution=Institution.objects.get(),
        license=license,
        issuer="https://idp.example.edu",
        audience="gateway",
        algorithms=["HS256"],
        hs256_secret=HS_SECRET,
    )


# --- what lands in the database ------------------------------------------------------------


def test_raw_columns_never_hold_the_plain_text(all_upstreams, license):
    direct = Connection.objects.get(provider__slug="direct", name="default")
    cloud = Connection.objects.get(provider__slug="cloud", name="default")
    issuer = make_issuer(license)
    stored = {
        (UPSTREAM_KEY, raw("catalog_connection", "api_key", direct.pk)),
        (AWS_SECRET_KEY, raw("catalog_connection", "aws_secret_access_key", cloud.pk)),
        (HS_SECRET, raw("licensing_jwtissuer", "hs256_secret", issuer.pk)),
    }
    for plain, token in stored:
        assert plain not in token and token.startswith("gAAAAA")  # a Fernet token
        assert decrypt(token) == plain
    # The id of an AWS key is not a secret: kept readable for the operator.
    assert raw("catalog_connection", "aws_access_key_id", cloud.pk) == cloud.aws_access_key_id
    # Empty stays empty (nothing stored), not an encrypted empty string.
    assert raw("catalog_connection", "api_key", cloud.pk) == ""


def test_loaded_secrets_are_sealed_and_never_print(all_upstreams):
    direct = Connection.objects.get(provider__slug="direct", name="default")
    assert isinstance(direct.api_key, Sealed)
    for text in (repr(direct.api_key), str(direct.api_key), repr(direct), str(direct.__dict__)):
        assert UPSTREAM_KEY not in text
    assert reveal(direct.api_key) == UPSTREAM_KEY and direct.has_credentials
    # Saving an untouched row keeps the secret (the token is written back as is).
    token = raw("catalog_connection", "api_key", direct.pk)
    direct.timeout = 30
    direct.save()
    assert raw("catalog_connection", "api_key", direct.pk) == token


def test_plain_text_longer_than_the_limit_is_refused(catalog):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as info:
        connection_configure(
            provider_slug="direct", base_url="https://x.example", api_key="k" * 501
        )
    assert "api_key" in info.value.message_dict


def test_the_api_works_end_to_end_with_encrypted_connections(client, gateway, catalog, api_key):
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=api_key, max_retries=0)
    answer = sdk.embeddings.create(
        model="text-embedding-3-small", input="hello", encoding_format="float"
    )
    assert answer.data[0].embedding
    # The fake upstream only answers its own key: the gateway sent the decrypted one.
    assert catalog["direct"].last.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_decryption_happens_once_per_snapshot_not_per_request(client, catalog, auth, monkeypatch):
    import core.crypto

    calls = []
    real = core.crypto.Sealed.reveal
    monkeypatch.setattr(core.crypto.Sealed, "reveal", lambda self: calls.append(1) or real(self))
    body = {"model": "text-embedding-3-small", "input": "hi"}
    for _ in range(5):
        assert client.post("/v1/embeddings", json=body, headers=auth).status_code == 200
    # Two connections (direct, aggregator), one snapshot: two decryptions for five requests.
    assert len(calls) == 2


# --- keys: rotation, wrong key, missing key -----------------------------------------------


def test_rotation_add_new_key_first_rotate_then_drop_the_old(catalog, license, keys):
    keys(KEY_A)
    connection_configure(
        provider_slug="direct", base_url=catalog["direct"].base_url, api_key="sk-r"
    )
    direct = Connection.objects.get(provider__slug="direct", name="default")
    Connection.objects.exclude(pk=direct.pk).delete()  # sealed under the default key
    issuer = make_issuer(license)
    before = raw("catalog_connection", "api_key", direct.pk)
    assert Fernet(KEY_A).decrypt(before.encode()) == b"sk-r"

    keys(KEY_B, KEY_A)  # 1. the new key first: old tokens still open
    assert reveal(Connection.objects.get(pk=direct.pk).api_key) == "sk-r"
    out = StringIO()
    call_command("rotate_secrets", stdout=out)  # 2. re-encrypt every row
    assert "re-encrypted" in out.getvalue()
    after = raw("catalog_connection", "api_key", direct.pk)
    assert after != before and Fernet(KEY_B).decrypt(after.encode()) == b"sk-r"
    hs_token = raw("licensing_jwtissuer", "hs256_secret", issuer.pk)
    assert Fernet(KEY_B).decrypt(hs_token.encode()) == HS_SECRET.encode()

    keys(KEY_B)  # 3. the old key dropped: everything still opens
    assert reveal(Connection.objects.get(pk=direct.pk).api_key) == "sk-r"
    assert reveal(JwtIssuer.objects.get(pk=issuer.pk).hs256_secret) == HS_SECRET


def test_wrong_key_is_a_503_and_a_clear_log_line_never_the_secret(
    client, catalog, auth, keys, gateway_log
):
    keys(KEY_A)
    connection_configure(
        provider_slug="direct", base_url=catalog["direct"].base_url, api_key=UPSTREAM_KEY
    )
    keys(KEY_B)  # the key the rows were sealed with is gone
    catalog["direct"].clear()
    response = client.post(
        "/v1/embeddings",
        json={"model": "text-embedding-3-small", "input": "hi"},
        headers=auth,
    )
    logged = "\n".join(gateway_log)
    assert response.status_code == 503
    assert response.json() == {"error": {"message": "Service temporarily unavailable"}}
    assert catalog["direct"].requests == []  # no provider call, nothing charged
    assert "connection direct/default: Cannot decrypt" in logged
    assert "GATEWAY_ENCRYPTION_KEYS" in logged
    assert UPSTREAM_KEY not in logged and UPSTREAM_KEY not in response.text

    with pytest.raises(CommandError) as info:  # rotation names the rows it cannot open
        call_command("rotate_secrets", stdout=StringIO())
    assert "catalog_connection.api_key" in str(info.value)


def test_wrong_key_for_an_hs256_issuer_is_a_503_not_a_401(client, license, keys):
    keys(KEY_A)
    make_issuer(license)
    keys(KEY_B)
    now = int(time.time())
    token = jwt.encode(
        {"iss": "https://idp.example.edu", "aud": "gateway", "sub": "s", "exp": now + 60},
        HS_SECRET,
        algorithm="HS256",
    )
    response = client.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 503
    keys(KEY_A)
    response = client.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200


def test_undecryptable_value_raises_a_clear_error(catalog):
    direct = Connection.objects.get(provider__slug="direct", name="default")
    set_raw("catalog_connection", "api_key", direct.pk, "gAAAAAnot-a-real-token")
    with pytest.raises(UndecryptableSecret, match="GATEWAY_ENCRYPTION_KEYS"):
        Connection.objects.get(pk=direct.pk).api_key.reveal()


def test_malformed_key_is_a_system_check_error(keys):
    with override_settings(GATEWAY_ENCRYPTION_KEYS=[KEY_A, "not-a-key"]):
        reset_keyring()
        errors = [e for e in run_checks() if e.id == "gateway.E003"]
        assert errors and "entry 2 is not a Fernet key" in errors[0].msg
        with pytest.raises(EncryptionKeyError, match="entry 2"):
            keyring()
    reset_keyring()


def test_without_keys_a_first_run_generates_one_private_key_file(tmp_path, gateway_log):
    path = tmp_path / "var" / "encryption.key"
    with override_settings(GATEWAY_ENCRYPTION_KEYS=[], GATEWAY_ENCRYPTION_KEY_FILE=path):
        token = keyring().encrypt(b"x")
        assert any("GATEWAY_ENCRYPTION_KEYS is not set" in line for line in gateway_log)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        first = path.read_bytes()
        reset_keyring()  # another process (or a restart) reads the same key
        assert keyring().decrypt(token) == b"x" and path.read_bytes() == first
    reset_keyring()


# --- the data migration --------------------------------------------------------------------


def test_migration_encrypts_existing_rows_and_reverses(transactional_db, catalog):
    """catalog's 0002 on a row written before it, back and forth. Only catalog's migrations
    are undone and done again (5; nothing else depends on them): undoing licensing's 33 as well
    cost ~20 s and tested nothing this test asserts. That every migration of the two apps can
    be undone is checked on each operation (`reversible`: a RunPython or RunSQL without its
    reverse would fail here), as `migrate` would refuse it."""
    executor = MigrationExecutor(connection)
    for (app, name), migration in executor.loader.disk_migrations.items():
        if app in ("catalog", "licensing"):
            for operation in migration.operations:
                assert operation.reversible, f"{app}.{name}: {operation.describe()}"
    direct = Connection.objects.get(provider__slug="direct", name="default")
    targets = [("catalog", "0001_initial")]
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(targets)
        # Back at 0001: the column holds plain text again.
        assert raw("catalog_connection", "api_key", direct.pk) == UPSTREAM_KEY
        set_raw("catalog_connection", "api_key", direct.pk, "sk-legacy-plain")
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    finally:
        MigrationExecutor(connection).migrate(latest)
    token = raw("catalog_connection", "api_key", direct.pk)
    assert "sk-legacy-plain" not in token and decrypt(token) == "sk-legacy-plain"


# --- configure_connection: secrets from the environment or a prompt ---------------------------


def configure(*args, stdin=None) -> str:
    out = StringIO()
    call_command("configure_connection", *args, stdout=out, stdin=stdin)
    return out.getvalue()


def stored(slug: str, field: str = "api_key") -> str:
    return reveal(getattr(Connection.objects.get(provider__slug=slug, name="default"), field))


def test_configure_connection_reads_the_secret_from_an_environment_variable(catalog, monkeypatch):
    monkeypatch.setenv("MY_PROVIDER_KEY", "sk-from-env")
    out = configure(
        "direct", "--base-url", "https://x.example/v1", "--api-key-env", "MY_PROVIDER_KEY"
    )
    assert "with credentials" in out and "sk-from-env" not in out
    assert stored("direct") == "sk-from-env"

    monkeypatch.setenv("AWS_SECRET", "aws-secret-from-env")
    configure(
        "cloud", "--base-url", "https://bedrock.example", "--aws-access-key-id", "AKIDX",
        "--aws-secret-access-key-env", "AWS_SECRET",
    )  # fmt: skip
    assert stored("cloud", "aws_secret_access_key") == "aws-secret-from-env"

    monkeypatch.delenv("MY_PROVIDER_KEY")
    with pytest.raises(CommandError, match="environment variable MY_PROVIDER_KEY"):
        configure(
            "direct", "--base-url", "https://x.example/v1", "--api-key-env", "MY_PROVIDER_KEY"
        )
    assert stored("direct") == "sk-from-env"  # unchanged


def test_configure_connection_prompts_or_reads_standard_input(catalog):
    configure(
        "direct",
        "--base-url",
        "https://x.example/v1",
        "--api-key",
        "-",
        stdin=StringIO("sk-typed\n"),
    )
    assert stored("direct") == "sk-typed"
    with pytest.raises(CommandError, match="No API key given"):
        configure(
            "direct", "--base-url", "https://x.example/v1", "--api-key", "-", stdin=StringIO("")
        )


def test_configure_connection_refuses_two_sources_for_one_secret(catalog, monkeypatch):
    monkeypatch.setenv("K", "sk-k")
    with pytest.raises(CommandError, match="not allowed with argument"):
        configure(
            "direct", "--base-url", "https://x.example/v1", "--api-key", "a", "--api-key-env", "K"
        )


def test_configure_connection_keeps_the_command_line_form(catalog):
    configure("direct", "--base-url", "https://x.example/v1", "--api-key", "sk-cli")
    assert stored("direct") == "sk-cli"
