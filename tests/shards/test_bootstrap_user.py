"""The bootstrap user file (`laminar.shards.bootstrap_user.read_user_file`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from laminar.replication.auth import SecretFileError
from laminar.shards.bootstrap_user import read_user_file


def _file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "admin.cred"
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


@pytest.mark.parametrize(
    ("text", "mode", "complaint"),
    [
        ("admin:pw\n", 0o644, "accessible by group or others"),
        ("admin\n", 0o600, "NAME:PASSWORD"),
        ("admin:\n", 0o600, "NAME:PASSWORD"),
        ("ad min:pw\n", 0o600, "invalid user name"),
        ("admin:pw\nbob:pw\n", 0o600, "one line"),
    ],
)
def test_a_bad_file_is_refused_with_the_reason(
    tmp_path: Path, text: str, mode: int, complaint: str
) -> None:
    with pytest.raises(SecretFileError, match=complaint):
        read_user_file(_file(tmp_path, text, mode))


def test_the_password_may_hold_colons(tmp_path: Path) -> None:
    assert read_user_file(_file(tmp_path, "admin:a:b c\n")) == ("admin", "a:b c")
