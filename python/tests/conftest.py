"""Fixtures: a real database (a SQLite file, or the PostgreSQL schema the Rust harness made and
named in EXACTLY_TEST_PY_DB) and the real `exactly` binary (EXACTLY_BIN, else on PATH)."""
import os
import shutil
import subprocess
import uuid

import pytest

import exactly


@pytest.fixture
def db(tmp_path):
    """A database string: a fresh SQLite file, or the shared PostgreSQL schema (tests there
    keep apart by unique job names and effect facts)."""
    return os.environ.get("EXACTLY_TEST_PY_DB") or str(tmp_path / "exactly.db")


@pytest.fixture
def store(db):
    s = exactly.open(db)
    yield s
    s.close()


@pytest.fixture
def uid():
    """A unique suffix for job names and targets."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def exactly_bin():
    path = os.environ.get("EXACTLY_BIN") or shutil.which("exactly")
    assert path, "the tests need the exactly binary: set EXACTLY_BIN or put it on PATH"
    return path


@pytest.fixture
def cli(exactly_bin, db):
    """Runs `exactly --db DB ARGS…`; returns the CompletedProcess (text)."""

    def run(*args, env=None, input=None):
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run([exactly_bin, "--db", db, *args], capture_output=True,
                              text=True, env=e, input=input, timeout=60)

    return run
