"""The arguments of an on-call's levers, without a database: durations, when a pause or a hold ends,
and the operator's name when the process's user has none (a container's uid without a passwd entry)."""

from __future__ import annotations

import argparse
import os
import pwd
from datetime import UTC, datetime, timedelta

import pytest

from pod_sweeper.cli.args import count, duration, positive
from pod_sweeper.cli.controls import login_name, window_of
from pod_sweeper.cli.main import build_parser
from pod_sweeper.core.errors import EXIT_CONFIG, ConfigError
from pod_sweeper.store.admin.controls import Window


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["forever", "0s", "0.5s", "-1m", "1 week", ""])
def test_a_duration_under_a_second_or_without_a_unit_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


@pytest.mark.parametrize("text", ["-1", "0", "1.5", "many", ""])
def test_a_count_is_a_whole_number_from_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        count(text)
    assert count("1") == 1 and count(" 1000 ") == 1000


@pytest.mark.parametrize("text", ["0", "-2", "nan", "inf", "x"])
def test_a_positive_number_is_finite_and_above_zero(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive(text)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["discard", "--namespace", "x", "--status", "pending", "--reason", "r", "--limit", "-1"], "--limit"),
        (["retry", "--dead", "--limit", "0"], "--limit"),
        (["discard", "--namespace", "x", "--reason", "r", "--older-than", "forever"], "--older-than"),
        (["retry", "--dead", "--older-than", "0s"], "--older-than"),
        (["pause", "--reason", "r", "--wait", "--wait-timeout", "-3"], "--wait-timeout"),
        (["prune", "--batch", "0"], "--batch"),
        (["prune", "--older-than", "-5"], "--older-than"),
        (["retry", "0"], "ID"),
    ],
)
def test_a_bad_number_is_one_line_naming_the_flag_typed_and_exit_2(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {flag}" in err, err
    assert "--for" not in err or flag == "--for"  # never a flag the command does not have


def window(**given: object) -> Window:
    return window_of(argparse.Namespace(**{"for_": None, "until": None, **given}))


def test_a_pause_lasts_an_hour_by_default_at_most_a_day_from_the_databases_clock_unless_until_is_given() -> None:
    assert window() == Window(length=timedelta(hours=1))  # a length: the database adds it to its now()
    assert window(for_="24h") == Window(length=timedelta(hours=24))
    with pytest.raises(ConfigError, match="argument --for: '25h': at most 24 h"):
        window(for_="25h")
    with pytest.raises(ConfigError, match=r"argument --for: '0\.5s': at least 1 s"):
        window(for_="0.5s")
    assert window(until="2026-12-10T09:00") == Window(until=datetime(2026, 12, 10, 9, 0, tzinfo=UTC))  # no zone: UTC
    assert window(until="2026-12-04T12:00+02:00") == Window(until=datetime(2026, 12, 4, 10, 0, tzinfo=UTC))
    with pytest.raises(ConfigError, match="not both"):
        window(for_="1h", until="2026-12-10T09:00")
    with pytest.raises(ConfigError, match="--until"):
        window(until="tomorrow")


def test_a_user_without_a_name_is_named_by_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert login_name() == f"uid {os.getuid()}"
    monkeypatch.setenv("USER", "ana")
    assert login_name() == "ana"
