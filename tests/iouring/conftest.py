"""io_uring tests run only where a ring can be set up; otherwise they say why."""

from __future__ import annotations

import pytest

from laminar.iouring import check_available

REASON = check_available()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if REASON is None:
        return
    for item in items:
        if "tests/iouring/" in str(item.fspath) and "unavailable" not in item.name:
            item.add_marker(pytest.mark.skip(reason=f"io_uring unavailable: {REASON}"))
