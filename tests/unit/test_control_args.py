"""The arguments of an on-call's levers, without a database: durations, when a pause or a hold ends,
and the operator's name when the process's user has none (a container's uid without a passwd entry)."""

from __future__ import annotations

import argparse
import os
import pwd
from datetime import UTC, datetime, timedelta

import pytest

from pod_sweeper.cli.controls import end_of, login_name, parse_duration
from pod_sweeper.core.errors import ConfigError

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def ends(**given: str | None) -> datetime:
    return end_of(argparse.Namespace(**{"for_": None, "until": None, **given}), NOW)


def test_a_pause_ends_after_an_hour_by_default_at_most_a_day_unless_until_is_given() -> None:
    assert ends() == NOW + timedelta(hours=1)
    assert ends(for_="24h") == NOW + timedelta(hours=24)
    with pytest.raises(ConfigError, match="between 1 s and 24 h"):
        ends(for_="25h")
    assert ends(until="2026-12-10T09:00") == datetime(2026, 12, 10, 9, 0, tzinfo=UTC)  # no zone: UTC
    assert ends(until="2026-12-04T12:00+02:00") == datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
    with pytest.raises(ConfigError, match="not both"):
        ends(for_="1h", until="2026-12-10T09:00")
    with pytest.raises(ConfigError, match="has passed"):
        ends(until="2026-12-04T08:59Z")


def test_a_user_without_a_name_is_named_by_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert login_name() == f"uid {os.getuid()}"
    monkeypatch.setenv("USER", "ana")
    assert login_name() == "ana"
