"""Settings: defaults, parsing of every kind of value, one-line errors that never echo a secret."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pod_sweeper.core.backoff import Backoff, describe_duration, retry_span
from pod_sweeper.core.errors import ConfigError
from pod_sweeper.core.settings import CONFIG_FILE_ENV, Settings, load_settings, redact_conninfo, unknown_environment


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("POD_SWEEPER_"):
            monkeypatch.delenv(key)


def test_defaults() -> None:
    s = load_settings()
    assert (s.poll_interval, s.lease_seconds, s.concurrency, s.max_attempts, s.http_port) == (5.0, 60.0, 16, 34, 9464)
    assert s.retention == timedelta(days=7)
    assert s.listen is True and s.log_format == "text"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("3600", timedelta(hours=1)),
        ("P2D", timedelta(days=2)),
        ("PT1H30M", timedelta(minutes=90)),
        ("0.5", timedelta(seconds=0.5)),
    ],
)
def test_retention_seconds_or_iso8601(monkeypatch: pytest.MonkeyPatch, raw: str, expected: timedelta) -> None:
    monkeypatch.setenv("POD_SWEEPER_RETENTION", raw)
    assert load_settings().retention == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("POLL_INTERVAL", "-1", "invalid setting POD_SWEEPER_POLL_INTERVAL: Input should be greater than 0"),
        ("CONCURRENCY", "lots", "invalid setting POD_SWEEPER_CONCURRENCY: Input should be a valid integer"),
        ("LOG_FORMAT", "xml", "invalid setting POD_SWEEPER_LOG_FORMAT: Input should be 'text' or 'json'"),
        ("HTTP_PORT", "70000", "invalid setting POD_SWEEPER_HTTP_PORT"),
        ("LISTEN", "maybe", "invalid setting POD_SWEEPER_LISTEN"),
        ("RETENTION", "-5", "retention must be positive"),
        ("REQUEST_TIMEOUT", "90", "request_timeout (90 s) must be shorter than lease_seconds (60 s)"),
    ],
)
def test_bad_values_name_the_setting(monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str) -> None:
    monkeypatch.setenv(f"POD_SWEEPER_{name}", value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RECONCILE_SANDBOX_LABEL": "sandbox"}, "set together or not at all"),
        (
            {"RECONCILE_SANDBOX_LABEL": "sandbox", "RECONCILE_GENERATION_LABEL": "generation"},
            "reconcile_namespace is required",
        ),
        (
            {"RECONCILE_SANDBOX_LABEL": "a", "RECONCILE_GENERATION_LABEL": "a", "RECONCILE_NAMESPACE": "ns"},
            "must differ",
        ),
        ({"RECONCILE_SANDBOX_LABEL": "-not a label"}, "invalid setting POD_SWEEPER_RECONCILE_SANDBOX_LABEL"),
        ({"RECONCILE_NAMESPACE": "Not_A_Namespace"}, "invalid setting POD_SWEEPER_RECONCILE_NAMESPACE"),
        ({"RECONCILE_PAGE_SIZE": "0"}, "invalid setting POD_SWEEPER_RECONCILE_PAGE_SIZE"),
    ],
)
def test_bad_reconcile_settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(f"POD_SWEEPER_{name}", value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_reconcile_is_on_only_with_both_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not load_settings().reconcile
    monkeypatch.setenv("POD_SWEEPER_RECONCILE_SANDBOX_LABEL", "example.com/sandbox")
    monkeypatch.setenv("POD_SWEEPER_RECONCILE_GENERATION_LABEL", "example.com/generation")
    monkeypatch.setenv("POD_SWEEPER_RECONCILE_NAMESPACE", "sandboxes")
    assert load_settings().reconcile


def test_bad_database_url_never_echoes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_SWEEPER_DATABASE_URL", "hunter2-is-my password")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "POD_SWEEPER_DATABASE_URL" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_password_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_SWEEPER_DATABASE_URL", "postgresql://app:s3cret@db.internal:5432/control")
    s = load_settings()
    for text in (repr(s), str(s), s.redacted_database_url(), str(s.model_dump())):
        assert "s3cret" not in text
    assert s.require_database_url().endswith("/control")
    assert "password=***" in s.redacted_database_url()


def test_missing_database_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="POD_SWEEPER_DATABASE_URL is not set"):
        load_settings().require_database_url()


def test_config_file_and_environment_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "pod-sweeper.toml"
    config.write_text('poll_interval = 2.5\nconcurrency = 4\nretention = "P1D"\n')
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    monkeypatch.setenv("POD_SWEEPER_CONCURRENCY", "8")
    s = load_settings()
    assert (s.poll_interval, s.concurrency, s.retention) == (2.5, 8, timedelta(days=1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("poll_intervall = 2\n", "POD_SWEEPER_POLL_INTERVALL: Extra inputs are not permitted"),
        ("poll_interval = [\n", "cannot read"),
        ("concurrency = 0\n", "POD_SWEEPER_CONCURRENCY"),
    ],
)
def test_bad_config_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    monkeypatch.setenv(CONFIG_FILE_ENV, str(config))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_settings()


def test_missing_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CONFIG_FILE_ENV, str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings()


def test_unknown_variables_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_SWEEPER_POL_INTERVAL", "1")
    monkeypatch.setenv("POD_SWEEPER_TEST_DATABASE_URL", "x")
    assert unknown_environment() == ["POD_SWEEPER_POL_INTERVAL"]


def test_redact_conninfo_key_value_form() -> None:
    assert "pw" not in redact_conninfo("host=h user=u password=pw dbname=d")


def test_the_attempts_span_what_their_description_says_and_at_least_an_hour() -> None:
    """The span is computed from the defaults themselves, so neither the settings table in
    docs/operations.md (made from these descriptions) nor this claim can drift from the code."""
    s = load_settings()
    span = retry_span(s.backoff_base, s.backoff_max, s.max_attempts)
    assert span.shortest >= 3600, "a row's own trouble gets at least an hour before it goes dead"
    described = Settings.model_fields["max_attempts"].description or ""
    said = f"{span.retries} retries spanning {describe_duration(span.shortest)} to {describe_duration(span.longest)}"
    assert said in described, described
    # Every retry comes back within backoff_max: a row never waits longer than that between attempts.
    assert Backoff(s.backoff_base, s.backoff_max).ceiling(s.max_attempts) == s.backoff_max


def test_every_setting_is_documented() -> None:
    for name, field in Settings.model_fields.items():
        assert field.description and len(field.description) > 20, name
        assert "Default" in field.description or "default" in field.description, name


@settings(max_examples=200)
@given(st.text(max_size=30))
def test_any_environment_value_gives_settings_or_one_config_error(value: str) -> None:
    import os

    if "\x00" in value:
        return
    os.environ["POD_SWEEPER_POLL_INTERVAL"] = value
    try:
        load_settings()
    except ConfigError as exc:
        assert str(exc).startswith("invalid setting POD_SWEEPER_POLL_INTERVAL")
        assert "\n" not in str(exc)
    finally:
        del os.environ["POD_SWEEPER_POLL_INTERVAL"]
