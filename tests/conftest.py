"""Shared test configuration."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

NO_PYSPARK = "pyspark is not installed: pip install 'pyspark[sql]==4.3.0'"

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("LAMINAR_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")


SESSION_GROUPS = ("tests/matrix", "tests/spark")
"""Test folders whose session-scoped fixtures (the matrix's topologies, the
SparkSession) all their tests share: each folder runs on one worker. (The
matrix split by topology, one worker each, ran four SparkSessions at once;
on a loaded machine their Python workers missed Spark's fixed 10 s to connect back.)"""

LONG_FIRST = ("tests/matrix", "tests/spark", "tests/cluster", "tests/system")
"""Folders whose scopes take longest (nodes, clusters, Spark), in that order:
their scopes are dispatched first so that no long scope starts last."""


def scope_of(nodeid: str) -> str:
    """The unit `make test` hands a worker: a file, or a `SESSION_GROUPS` folder."""
    path = nodeid.split("::", 1)[0]
    folder = path.rsplit("/", 1)[0]
    return folder if folder in SESSION_GROUPS else path


def dispatch_rank(scope: str) -> int:
    """Where a scope's folder stands in `LONG_FIRST` (others after them)."""
    for rank, folder in enumerate(LONG_FIRST):
        if scope.startswith(folder):
            return rank
    return len(LONG_FIRST)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, when it is there
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `pytest -n N` (`make test`) the tests of one scope (`scope_of`)
    run on one worker, in order, sharing its module fixtures (a file's
    cluster) or session fixtures; scopes are spread over the workers, the
    long ones first (collection order, `pytest_collection_modifyitems`).
    (xdist's own `--dist loadgroup` marks are lost on pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # keep the order given at collection

    class ByScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ByScopeScheduling(config, log)


SOAK = os.environ.get("LAMINAR_SOAK") == "1"
"""`make soak` sets it: the `soak` tests run, and some tests run longer."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the `soak` tests unless LAMINAR_SOAK=1 or `-m` names them:
    deselected, not skipped, so that every skip a default run reports is a
    capability this machine lacks. Then order the long scopes first."""
    if not (SOAK or "soak" in config.option.markexpr):
        soak = [item for item in items if item.get_closest_marker("soak")]
        if soak:
            config.hook.pytest_deselected(items=soak)
            items[:] = [item for item in items if not item.get_closest_marker("soak")]
    # Long scopes first (a stable sort: each scope's tests keep their order).
    items.sort(key=lambda item: dispatch_rank(scope_of(item.nodeid)))


def pytest_configure(config: pytest.Config) -> None:
    # PySpark 4.3 warns about pandas 3 whenever an Arrow UDF is planned; not ours.
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning"
    )


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One SparkSession for every test that needs one (PLATFORM.md: a session
    costs 5-10 s to start, so it is shared; skipped without pyspark):
    local[2] with one task retry (local[N, maxFailures]) so a failed task is
    run again, as on a cluster; no UI; scratch space in a temp dir."""
    pytest.importorskip("pyspark", reason=NO_PYSPARK)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2, 2]")
        .appName("laminar-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from laminar.spark import LaminarDataSource

    session.dataSource.register(LaminarDataSource)
    yield session
    session.stop()
