"""What of ``source.auth`` is shown (:func:`syncd.config.secrets.shown_auth`): the shape of
each auth kind, ``***`` for every secret, every reference and every key not on the list."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from syncd.api import views
from syncd.config.secrets import connector_secrets, redact_source, shown_auth
from syncd.observability.logs import MASK
from syncd.sources.http.auth_config import validate_auth

M = MASK

# (auth, what is shown), one per kind and grant, every optional key present.
KINDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "bearer": (
        {"type": "bearer", "token": "tok-literal-1"},
        {"type": "bearer", "token": M},
    ),
    "basic": (
        {"type": "basic", "username": "user-bob-2", "password": "pw-literal-3"},
        {"type": "basic", "username": M, "password": M},
    ),
    "api_key header": (
        {"type": "api_key", "in": "header", "name": "X-Api-Key", "value": "key-literal-4"},
        {"type": "api_key", "in": "header", "name": "X-Api-Key", "value": M},
    ),
    "api_key query": (
        {"type": "api_key", "in": "query", "name": "api_key", "value": "${env:KEY_VAR_5}"},
        {"type": "api_key", "in": "query", "name": "api_key", "value": M},
    ),
    "oauth2 client_credentials": (
        {
            "type": "oauth2",
            "grant": "client_credentials",
            "token_url": "https://auth.example.com/oauth/token",
            "client_id": "client-id-6",
            "client_secret": "client-secret-7",
            "scopes": ["read", "write"],
            "audience": "https://api.example.com",
            "extra": {"resource": "res-value-8", "client_assertion": "assertion-9"},
            "client_auth": "post",
        },
        {
            "type": "oauth2",
            "grant": "client_credentials",
            "token_url": "https://auth.example.com/oauth/token",
            "client_id": M,
            "client_secret": M,
            "scopes": ["read", "write"],
            "audience": "https://api.example.com",
            "extra": {"resource": M, "client_assertion": M},
            "client_auth": "post",
        },
    ),
    "oauth2 refresh_token": (
        {
            "type": "oauth2",
            "grant": "refresh_token",
            "token_url": "https://auth.example.com/token",
            "client_id": "${env:CLIENT_ID_VAR}",
            "client_secret": "${file:/run/secrets/client-secret-10}",
            "refresh_token": "refresh-literal-11",
        },
        {
            "type": "oauth2",
            "grant": "refresh_token",
            "token_url": "https://auth.example.com/token",
            "client_id": M,
            "client_secret": M,
            "refresh_token": M,
        },
    ),
}

# Every value written in KINDS that is, holds or names a secret (or an identity).
HIDDEN = [
    "tok-literal-1",
    "user-bob-2",
    "pw-literal-3",
    "key-literal-4",
    "KEY_VAR_5",
    "client-id-6",
    "client-secret-7",
    "res-value-8",
    "assertion-9",
    "CLIENT_ID_VAR",
    "client-secret-10",
    "refresh-literal-11",
]


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_shows_its_shape_and_masks_the_rest(kind: str) -> None:
    auth, expected = KINDS[kind]
    before = copy.deepcopy(auth)
    shown = shown_auth(auth)
    assert shown == expected
    assert list(shown) == list(auth)  # the key order of the config
    assert auth == before  # the config is not changed
    assert validate_auth(auth) == {}  # each example is a valid auth
    text = json.dumps(shown)
    assert not [h for h in HIDDEN if h in text]


@pytest.mark.parametrize("kind", list(KINDS))
def test_nothing_the_log_redaction_calls_a_secret_is_shown(kind: str) -> None:
    auth, _ = KINDS[kind]
    environ = {"KEY_VAR_5": "resolved-key", "CLIENT_ID_VAR": "resolved-id"}
    text = json.dumps(shown_auth(auth))
    source = {"url": "https://api.example.com/x", "auth": auth}
    for secret in connector_secrets(source, environ=environ):
        assert secret not in text


def test_a_reference_is_masked_in_a_key_that_is_shown() -> None:
    auth = {
        "type": "oauth2",
        "grant": "client_credentials",
        "token_url": "${env:TOKEN_URL}",
        "client_id": "id",
        "client_secret": "s",
        "scopes": ["read", "${env:SCOPE}", "x${file:/run/scope}"],
        "audience": "https://${env:AUDIENCE_HOST}/api",  # a reference inside a value
    }
    assert shown_auth(auth) == {
        "type": "oauth2",
        "grant": "client_credentials",
        "token_url": M,
        "client_id": M,
        "client_secret": M,
        "scopes": ["read", M, M],
        "audience": M,
    }
    # Not valid (refused by validate_auth), still never shown.
    named = {"type": "api_key", "in": "${env:IN}", "name": "${env:HEADER_NAME}", "value": "v"}
    assert shown_auth(named) == {"type": "api_key", "in": M, "name": M, "value": M}
    assert shown_auth({"type": "${env:T}", "token": "t"}) == {"type": M, "token": M}


def test_a_token_url_shows_no_password_nor_secret_query_value() -> None:
    auth = {
        "type": "oauth2",
        "grant": "client_credentials",
        "token_url": "https://app:url-pw@auth.example.com/token?client_secret=q-secret&tenant=t1",
        "client_id": "id",
        "client_secret": "s",
    }
    shown = shown_auth(auth)
    assert (
        shown["token_url"] == "https://app:***@auth.example.com/token?client_secret=***&tenant=t1"
    )


def test_unknown_keys_and_kinds_are_masked() -> None:
    # A key its kind does not list, even one another kind shows.
    assert shown_auth({"type": "bearer", "token": "t", "name": "n", "note": "hi"}) == {
        "type": "bearer",
        "token": M,
        "name": M,
        "note": M,
    }
    assert shown_auth({"type": "basic", "username": "u", "password": "p", "in": "header"}) == {
        "type": "basic",
        "username": M,
        "password": M,
        "in": M,
    }
    # An unknown kind, or none: nothing is shown, not even the type.
    assert shown_auth({"type": "digest", "realm": "r", "password": "p"}) == {
        "type": M,
        "realm": M,
        "password": M,
    }
    assert shown_auth({"client_secret": "s", "scopes": ["a"]}) == {
        "client_secret": M,
        "scopes": M,
    }
    assert shown_auth({"type": ["oauth2"], "grant": "g"}) == {"type": M, "grant": M}
    assert shown_auth({1: "x", "type": "bearer"}) == {"1": M, "type": "bearer"}


def test_values_that_are_not_plain_text_are_masked() -> None:
    auth = {
        "type": "oauth2",
        "grant": {"nested": "secret"},
        "token_url": 42,
        "scopes": "read write",  # not a list
        "audience": ["a"],
        "client_auth": True,
        "extra": "form=1",
        "client_id": None,
    }
    assert shown_auth(auth) == {
        "type": "oauth2",
        "grant": M,
        "token_url": M,
        "scopes": M,
        "audience": M,
        "client_auth": M,
        "extra": M,
        "client_id": M,
    }
    # Null in a shown key says nothing secret.
    assert shown_auth({"type": "oauth2", "scopes": None, "extra": None}) == {
        "type": "oauth2",
        "scopes": None,
        "extra": None,
    }
    assert shown_auth({"type": "oauth2", "scopes": ["a", 1, None]})["scopes"] == ["a", M, M]


def test_no_auth_and_an_auth_that_is_not_an_object() -> None:
    assert shown_auth(None) is None
    assert shown_auth("Bearer literal") == M
    assert shown_auth(["token"]) == M


def test_a_source_shows_the_shape_where_it_is_the_http_source_auth() -> None:
    auth, expected = KINDS["oauth2 client_credentials"]
    http = {"type": "http", "url": "https://api.example.com/x", "auth": auth}
    assert redact_source(http)["auth"] == expected
    untyped = {"url": "https://api.example.com/x", "auth": auth}  # `http` when omitted
    assert redact_source(untyped)["auth"] == expected
    assert redact_source({**http, "auth": None})["auth"] is None
    # A plugin's own `auth` (of any shape) and an indexer's are masked whole, as before.
    assert redact_source({"type": "acme", "auth": auth})["auth"] == M
    assert views.redact_indexer({"type": "acme", "auth": auth})["auth"] == M
    assert views.redact_source(http)["auth"] == expected
    # The cached text of the API's answers masks alike, by kind.
    assert json.loads(views.masked_config_text(http, source=True))["auth"] == expected
    assert json.loads(views.masked_config_text(http, source=False))["auth"] == M


def test_the_mask_sent_back_is_refused() -> None:
    """A value shown as ``***`` and sent back would replace the secret with the mask."""
    message = 'Still masked ("***"): write the secret or a ${env:NAME} / ${file:/path} reference'
    for _, expected in KINDS.values():
        masked = [k for k, v in expected.items() if v == M]
        errors = validate_auth(expected)
        assert {f"source.auth.{k}" for k in masked} <= set(errors)
        assert all(errors[f"source.auth.{k}"] == message for k in masked)
    auth, expected = KINDS["oauth2 client_credentials"]
    errors = validate_auth({**auth, "extra": expected["extra"], "scopes": ["read", M]})
    assert errors == {
        "source.auth.extra.resource": message,
        "source.auth.extra.client_assertion": message,
        "source.auth.scopes": message,
    }
