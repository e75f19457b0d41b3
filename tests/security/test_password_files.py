"""One rule for a password in a file, whoever reads it (the CLI's
--password-file, the Spark connector's passwordFile, the node's bootstrap user
file): the file's one line without its line end; spaces are the password's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from laminar.cli.common import read_password
from laminar.security.scram import password_line
from laminar.shards.bootstrap_user import read_user_file
from laminar.spark.security import _read_password


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("s3cret\n", "s3cret"),
        ("s3cret", "s3cret"),
        ("s3cret\r\n", "s3cret"),
        ("  spaced out  \n", "  spaced out  "),
        ("", None),
        ("\n", None),
        ("two\nlines\n", None),
        ("carriage\rreturn", None),
    ],
)
def test_a_password_is_the_one_line_without_its_end(text: str, password: str | None) -> None:
    assert password_line(text) == password


def test_every_reader_takes_the_same_password_from_the_same_line(tmp_path: Path) -> None:
    line = " pass word \t\n"
    plain, user = tmp_path / "pw", tmp_path / "user.cred"
    plain.write_text(line)
    user.write_text("admin:" + line)
    for path in (plain, user):
        os.chmod(path, 0o600)
    assert read_password(str(plain)) == " pass word \t"
    assert _read_password(str(plain)) == " pass word \t"
    assert read_user_file(str(user)) == ("admin", " pass word \t")
