"""Passwords are stored with scrypt unless the code that builds the app says otherwise (the
test suite does, for speed); the environment cannot lower it."""

from __future__ import annotations

from app import create_app
from app.config import Config
from app.crypto import check_password
from app.repo.staff import create_staff

from .conftest import PG_URL, REDIS_URL, SECRET_KEY, T0, TEST_PASSWORD_HASH


def test_the_environment_cannot_choose_the_password_hash() -> None:
    environ = {"RATCHET_PASSWORD_HASH": "pbkdf2:sha256:1", "SECRET_KEY": SECRET_KEY}
    config = Config.from_env(environ)
    assert config.password_hash == "scrypt"


def test_an_app_built_with_the_defaults_stores_scrypt_hashes_that_verify() -> None:
    app = create_app({"database_url": PG_URL, "redis_url": REDIS_URL, "secret_key": SECRET_KEY})
    database = app.extensions["ratchet.db"]
    try:
        with app.app_context(), database.transaction() as session:
            staff = create_staff(session, "ada@example.test", "viewer", "correct horse", T0)
            stored = staff.password_hash
            session.rollback()
    finally:
        database.dispose()
        app.extensions["ratchet.redis"].close()
    assert stored.startswith("scrypt:") and "correct horse" not in stored
    assert check_password("correct horse", stored) and not check_password("wrong", stored)


def test_the_suites_fast_hash_is_only_the_suites() -> None:
    default = Config.from_env({"SECRET_KEY": SECRET_KEY}).password_hash
    assert default == "scrypt" != TEST_PASSWORD_HASH
