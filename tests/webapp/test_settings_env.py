import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp.env import env_bool, env_int, env_list, env_str, env_url

SETTINGS = Path(__file__).resolve().parents[2] / "webapp" / "settings.py"


def load_settings() -> dict:
    """Run webapp/settings.py afresh under the current environment."""
    return runpy.run_path(str(SETTINGS))


def test_it_reads_booleans_in_common_spellings(monkeypatch):
    for text, expected in [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)]:
        monkeypatch.setenv("FLAG", text)
        assert env_bool("FLAG", not expected) is expected


def test_it_uses_the_default_for_unset_or_blank_values(monkeypatch):
    monkeypatch.delenv("FLAG", raising=False)
    assert env_bool("FLAG", True) is True
    monkeypatch.setenv("FLAG", "  ")
    assert env_int("FLAG", 7) == 7
    assert env_str("FLAG", "x") == "x"
    assert env_list("FLAG", ["a"]) == ["a"]


def test_it_rejects_a_boolean_it_cannot_read(monkeypatch):
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="FLAG must be one of"):
        env_bool("FLAG", False)


def test_it_rejects_a_non_integer(monkeypatch):
    monkeypatch.setenv("COUNT", "ten")
    with pytest.raises(ImproperlyConfigured, match="COUNT must be a whole number"):
        env_int("COUNT", 1)


def test_it_rejects_an_integer_below_the_minimum(monkeypatch):
    monkeypatch.setenv("COUNT", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env_int("COUNT", 5, minimum=1)


def test_it_requires_a_value_without_default(monkeypatch):
    monkeypatch.delenv("NEEDED", raising=False)
    with pytest.raises(ImproperlyConfigured, match="set the NEEDED"):
        env_str("NEEDED")


def test_it_splits_comma_lists(monkeypatch):
    monkeypatch.setenv("HOSTS", "a.example, b.example,,")
    assert env_list("HOSTS", []) == ["a.example", "b.example"]


def test_it_rejects_a_url_with_the_wrong_scheme(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "http://127.0.0.1:6379")
    with pytest.raises(
        ImproperlyConfigured, match="REDIS_URL must be a URL starting with redis://"
    ):
        env_url("REDIS_URL", "redis://x", schemes=("redis",))


def test_settings_refuse_to_start_without_a_secret_key_unless_debugging(monkeypatch, tmp_path):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "absent"))
    monkeypatch.setenv("DEBUG", "0")
    with pytest.raises(ImproperlyConfigured, match="set SECRET_KEY"):
        load_settings()
    monkeypatch.setenv("DEBUG", "1")
    assert load_settings()["SECRET_KEY"].startswith("django-insecure")


def test_settings_read_the_secret_key_file_that_bin_run_writes(monkeypatch, tmp_path):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("DEBUG", "0")
    (tmp_path / "secret_key").write_text("from-the-file\n")
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "secret_key"))
    assert load_settings()["SECRET_KEY"] == "from-the-file"
    monkeypatch.setenv("SECRET_KEY", "from-the-env")
    assert load_settings()["SECRET_KEY"] == "from-the-env"


def test_settings_use_sqlite_under_var_by_default(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = load_settings()
    database = settings["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.sqlite3"
    assert str(database["NAME"]).endswith("var/db.sqlite3")


def test_settings_use_postgresql_from_database_url(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://gf:pw@db.internal:5433/gemmforge")
    database = load_settings()["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["HOST"], database["PORT"], database["NAME"]) == (
        "db.internal",
        5433,
        "gemmforge",
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://root@localhost/db"),
        ("DATABASE_URL", "not a url"),
        ("REDIS_URL", "127.0.0.1:6379"),
        ("DEBUG", "perhaps"),
        ("WORKER_HEARTBEAT_SECONDS", "soon"),
        ("CELERY_TASK_SOFT_TIME_LIMIT", "99999"),
    ],
)
def test_settings_reject_bad_environment_values(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        load_settings()


def test_settings_read_redis_url_for_the_broker(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://cache.internal:6380/3")
    settings = load_settings()
    assert settings["CELERY_BROKER_URL"] == "redis://cache.internal:6380/3"
    assert settings["CELERY_RESULT_BACKEND"] == "redis://cache.internal:6380/3"


def test_settings_read_allowed_hosts(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", "gemmforge.example,10.0.0.5")
    assert load_settings()["ALLOWED_HOSTS"] == ["gemmforge.example", "10.0.0.5"]


def namespace_for(monkeypatch, **env) -> dict:
    monkeypatch.delenv("GEMMFORGE_NAMESPACE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def test_every_redis_key_of_an_install_carries_its_namespace(monkeypatch):
    settings = namespace_for(monkeypatch, GEMMFORGE_NAMESPACE="gf-lab2")
    assert settings["GEMMFORGE_NAMESPACE"] == "gf-lab2"
    assert settings["CELERY_BROKER_TRANSPORT_OPTIONS"]["global_keyprefix"] == "gf-lab2:"
    assert settings["CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS"]["global_keyprefix"] == "gf-lab2:"
    assert settings["CACHES"]["default"]["KEY_PREFIX"] == "gf-lab2"


def test_the_default_namespace_is_the_installs_database(monkeypatch, tmp_path):
    main_host = "postgres://gemmforge:secret@127.0.0.1:5432/gemmforge"
    gpu_host = "postgres://gemmforge:other@main.internal:6432/gemmforge"
    one = namespace_for(monkeypatch, DATABASE_URL=main_host)["GEMMFORGE_NAMESPACE"]
    same = namespace_for(monkeypatch, DATABASE_URL=gpu_host)["GEMMFORGE_NAMESPACE"]
    other = namespace_for(monkeypatch, DATABASE_URL=main_host.replace("/gemmforge", "/lab2"))
    first = namespace_for(monkeypatch, DATABASE_URL=f"sqlite:///{tmp_path / 'a' / 'db.sqlite3'}")
    second = namespace_for(monkeypatch, DATABASE_URL=f"sqlite:///{tmp_path / 'b' / 'db.sqlite3'}")
    assert one == same  # every machine of one install agrees, whatever host it reaches it by
    assert one.startswith("gf-")
    assert other["GEMMFORGE_NAMESPACE"] != one
    assert first["GEMMFORGE_NAMESPACE"] != second["GEMMFORGE_NAMESPACE"]  # two checkouts


@pytest.mark.parametrize("value", ["has space", "a:b", "x" * 65, "tab\there"])
def test_a_namespace_that_would_not_make_a_clean_key_prefix_is_refused(monkeypatch, value):
    monkeypatch.setenv("GEMMFORGE_NAMESPACE", value)
    with pytest.raises(ImproperlyConfigured, match="GEMMFORGE_NAMESPACE"):
        load_settings()


def test_lost_messages_are_re_sent_within_minutes_by_default(monkeypatch):
    monkeypatch.delenv("WORK_STALE_QUEUED_SECONDS", raising=False)
    assert load_settings()["WORK_STALE_QUEUED_SECONDS"] <= 300
