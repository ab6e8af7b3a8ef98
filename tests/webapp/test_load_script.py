"""bench/stack/load_test.py's argument parsing (the load test itself is not part of the suite)."""

import pytest

from tests import bench_scripts


@pytest.fixture(scope="module")
def load_test():
    return bench_scripts.load("stack/load_test")


def test_the_defaults_are_50_users_for_30_seconds_over_10000_candidates(load_test):
    args = load_test.parse_args([])
    assert (args.connections, args.duration, args.candidates) == (50, 30, 10000)
    assert args.postgres is None
    assert args.out.parent == bench_scripts.BENCH / "results"
    assert args.out.name.endswith("-load")


def test_options_are_read(load_test, tmp_path):
    args = load_test.parse_args(
        [
            "--connections",
            "8",
            "--duration",
            "3",
            "--postgres",
            "postgres://h/db",
            "--out",
            str(tmp_path),
        ]
    )
    assert (args.connections, args.duration, args.postgres, args.out) == (
        8,
        3,
        "postgres://h/db",
        tmp_path,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--connections", "0"],
        ["--duration", "-1"],
        ["--connections", "many"],
        ["--wrk-threads", "4", "--connections", "2"],
        ["--postgres", "mysql://h/db"],
        ["--write-interval", "0"],
    ],
)
def test_bad_options_are_refused(load_test, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_test.parse_args(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err
