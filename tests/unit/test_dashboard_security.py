"""The dashboard's access rules (pure): tokens, login cookies, CSRF tokens, binding, logs."""

from __future__ import annotations

import logging

import pytest

from lockgate.cli.dashboard import ScrubTokens
from lockgate.dashboard.security import (
    LOGIN_MAX_AGE,
    bearer,
    bind_refusal,
    csrf_token,
    csrf_valid,
    derive_key,
    is_loopback,
    login_cookie,
    login_valid,
    new_session,
    scrub,
    session_valid,
    token_matches,
)


def test_the_token_matches_only_itself() -> None:
    assert token_matches("s3cret", "s3cret")
    assert not token_matches("s3cret", "s3cret ")
    assert not token_matches("s3cret", "")
    assert not token_matches("s3cret", None)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_reads_the_authorization_header(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


def test_the_key_follows_the_token_and_is_random_without_one() -> None:
    assert derive_key("a") == derive_key("a")
    assert derive_key("a") != derive_key("b")
    assert derive_key("a", b"secret") == derive_key("a", b"secret")
    assert derive_key("a", b"secret") != derive_key("a", b"other secret")
    assert derive_key("a", b"secret") != derive_key("a")
    assert derive_key(None) != derive_key(None)
    assert b"s3cret-token" not in derive_key("s3cret-token")


def test_a_login_cookie_is_valid_with_its_key_until_it_expires() -> None:
    key = derive_key("token")
    value = login_cookie(key, 1000.0)
    assert "token" not in value
    assert login_valid(key, value, 1000.0)
    assert login_valid(key, value, 1000.0 + LOGIN_MAX_AGE)
    assert not login_valid(key, value, 1001.0 + LOGIN_MAX_AGE)
    assert not login_valid(key, value, 999.0)  # issued in the future
    assert not login_valid(derive_key("other"), value, 1000.0)


@pytest.mark.parametrize("value", [None, "", "1000", "1000.", "x.y", "1000.00", "-5.abc"])
def test_a_malformed_login_cookie_is_refused(value: str | None) -> None:
    assert not login_valid(derive_key("token"), value, 1000.0)


def test_a_forged_login_cookie_is_refused() -> None:
    key = derive_key("token")
    _, _, mac = login_cookie(key, 1000.0).partition(".")
    assert not login_valid(key, f"2000.{mac}", 2000.0)  # another time, same MAC


def test_csrf_tokens_bind_to_the_session_and_the_key() -> None:
    key, session = derive_key("token"), new_session()
    token = csrf_token(key, session)
    assert csrf_valid(key, session, token)
    assert not csrf_valid(key, new_session(), token)
    assert not csrf_valid(derive_key("other"), session, token)
    assert not csrf_valid(key, session, token[:-1] + ("0" if token[-1] != "0" else "1"))
    assert not csrf_valid(key, session, "")
    assert not csrf_valid(key, session, None)
    assert not csrf_valid(key, None, token)


def test_sessions_are_random_and_checked_for_shape() -> None:
    first, second = new_session(), new_session()
    assert first != second
    assert session_valid(first)
    assert not session_valid(None)
    assert not session_valid("short")
    assert not session_valid(first[:-1] + "!")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_only_a_loopback_address_may_go_without_a_token() -> None:
    assert bind_refusal("127.0.0.1", None) is None
    assert bind_refusal("0.0.0.0", "t") is None
    refusal = bind_refusal("0.0.0.0", None)
    assert refusal is not None and "\n" not in refusal and "--token" in refusal
    assert bind_refusal("0.0.0.0", "") is not None


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("/?token=abc", "/?token=***"),
        ("/dead?x=1&token=abc&y=2", "/dead?x=1&token=***&y=2"),
        ("/?access_token=abc", "/?access_token=***"),
        ("/?TOKEN=abc", "/?TOKEN=***"),
        ("/jobs?id=tokenish", "/jobs?id=tokenish"),
        ("/dead", "/dead"),
    ],
)
def test_scrub_hides_token_values(text: str, scrubbed: str) -> None:
    assert scrub(text) == scrubbed


def test_the_access_log_filter_scrubs_the_request_line() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/?token=s3cret", "1.1", 401), None,
    )  # fmt: skip
    assert ScrubTokens().filter(record)
    assert "s3cret" not in record.getMessage()
    assert "/?token=***" in record.getMessage()
