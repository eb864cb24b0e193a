"""The fault run at CI size, inside `make test` (tests/chaos/run.py): 1,000 messages through
the API to the web under gunicorn, three campaign workers and the sweeper on a PostgreSQL
cluster of the run's own, with 20 SIGKILLs, a SIGSTOP past the lease, one Redis flush,
PostgreSQL restarted in intake and while sending, clients cutting their own connections,
the sandbox's 5xx, 429, timeouts after accepting and duplicated, shuffled, late webhooks,
and an operator cancelling, pausing, resuming and requeueing. The checker's line must be
clean and every dead letter explained.

On two hosts (network namespaces, tests/chaos/hosts.py), each with a web and campaign
workers, the clients posting through both webs; where namespaces cannot be made, on this
machine's network alone, and the report's second line says so and why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..chaos.faults import Plan
from ..chaos.private_pg import PrivatePostgres, private_pg  # noqa: F401  (the fixture)
from ..chaos.run import chaos_run, complaints
from ..sandbox.conftest import SandboxProcess

PLAN = Plan(
    messages=int(os.environ.get("RATCHET_CHAOS_CI_MESSAGES", "1000")),
    kills=int(os.environ.get("RATCHET_CHAOS_CI_KILLS", "20")),
)
HOSTS = int(os.environ.get("RATCHET_CHAOS_CI_HOSTS", "2"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_ci_size_run_through_every_fault_reads_clean(
    private_pg: PrivatePostgres,  # noqa: F811
    redis_url: str,
    sandbox: SandboxProcess,
    tmp_path: Path,
) -> None:
    outcome = chaos_run(PLAN, private_pg, redis_url, sandbox.url, tmp_path, HOSTS)
    print(f"\n{outcome.report()}")
    assert outcome.verdict.clean, outcome.verdict.line()
    assert not complaints(outcome, PLAN), complaints(outcome, PLAN)
