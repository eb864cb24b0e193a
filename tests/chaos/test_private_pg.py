"""The fault runs' own PostgreSQL cluster: migrated, restarted in both modes with every
connection cut and every commit kept, and gone (directory and server) after the run."""

from __future__ import annotations

import psycopg
import pytest

from .private_pg import PrivatePostgres, private_postgres


@pytest.mark.slow
def test_a_private_cluster_restarts_keeping_commits_and_is_removed_after() -> None:
    with private_postgres() as cluster:
        assert isinstance(cluster, PrivatePostgres)
        with psycopg.connect(cluster.dsn, autocommit=True) as connection:
            # Migrated: Ratchet's tables are there.
            assert connection.execute("SELECT count(*) FROM messages").fetchone() == (0,)
            connection.execute("CREATE TABLE kept (n int)")
            connection.execute("INSERT INTO kept VALUES (1)")
        held = psycopg.connect(cluster.dsn, autocommit=True)
        for mode in ("fast", "immediate"):
            assert cluster.restart(mode) > 0
            with psycopg.connect(cluster.dsn) as connection:
                assert connection.execute("SELECT n FROM kept").fetchall() == [(1,)]
        with pytest.raises(psycopg.OperationalError):
            held.execute("SELECT 1")  # cut by the restart
        held.close()
        assert cluster.restarts == 2
        directory, dsn = cluster.directory, cluster.dsn
    assert not directory.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)
