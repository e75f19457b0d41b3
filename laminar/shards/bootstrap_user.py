"""The first user (`--bootstrap-user-file`): created once, as a superuser.

A node with `--auth scram` and no user could never be administered (every
request needs a principal the ACLs allow), so the operator names one in an
owner-only `NAME:PASSWORD` file. The metadata owner shard of every node that
is given the file keeps trying until the cluster has a user of that name:
in a cluster only the metadata leader's attempt lands (the others hear
NOT_LEADER and wait for the entry to arrive). A user of that name that exists
already is left as it is, whatever its password: the file creates, it never
resets (a password changed with `laminar user` stays changed across restarts).
The password is salted and hashed here (`make_credential`, one credential per
mechanism); the metadata stores only the keys.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from laminar.replication.auth import SecretFileError, read_private_file
from laminar.replication.metalog import MetadataService
from laminar.security.credentials import check_user_name
from laminar.security.errors import Refusal, SecurityRefusal
from laminar.security.scram import PASSWORD_CHARS_MAX, Mechanism, make_credential, password_line

logger = logging.getLogger("laminar.shards")

RETRY_S: Final = 0.5
"""How long to wait before trying again after NOT_LEADER / NOT_READY."""


def read_user_file(path: str) -> tuple[str, str]:
    """(name, password) from an owner-only `NAME:PASSWORD` file; raises
    `SecretFileError` saying what is wrong (at start-up, before any shard runs)."""
    what = "the bootstrap user file"
    line = password_line(read_private_file(path, what).decode("utf-8", "replace"))
    name, sep, password = (line or "").partition(":")
    if not sep or not password:
        raise SecretFileError(f"{what} {path} must hold one line, NAME:PASSWORD")
    try:
        check_user_name(name)
    except SecurityRefusal as exc:
        raise SecretFileError(f"{what} {path}: {exc.message}") from None
    if len(password) > PASSWORD_CHARS_MAX:
        raise SecretFileError(
            f"{what} {path}: a password has at most {PASSWORD_CHARS_MAX} characters"
        )
    return name, password


async def keep_bootstrap_user(metadata: MetadataService, name: str, password: str) -> None:
    """Return once the cluster has user `name`, creating it (a superuser) if
    this node leads the metadata; retries until then."""
    credentials = tuple(make_credential(m, password) for m in Mechanism)
    while True:
        await metadata.ready()
        if name in metadata.state.security.users:
            return
        try:
            await metadata.create_user(name, credentials, superuser=True)
            logger.info("created the bootstrap user %r (a superuser)", name)
            return
        except SecurityRefusal as exc:
            if exc.refusal is Refusal.EXISTS:
                return
            logger.error("the bootstrap user %r cannot be created: %s", name, exc.message)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # NOT_LEADER, NOT_READY, a lost quorum: all retried
            logger.debug("bootstrap user %r not created yet: %s", name, exc)
        await asyncio.sleep(RETRY_S)
