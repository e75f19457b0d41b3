"""Hypothesis strategies for the security ops' frames (`laminar.security.frames`)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from laminar.security import frames as sf
from laminar.security.acls import (
    MATCH,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from laminar.security.credentials import UserInfo
from laminar.security.scram import Mechanism, ScramCredential

names = st.text(max_size=20)
credentials = st.lists(
    st.builds(
        ScramCredential,
        st.sampled_from(Mechanism),
        st.binary(max_size=64),
        st.integers(0, 2**32),
        st.binary(max_size=64),
        st.binary(max_size=64),
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda c: c.mechanism,
).map(lambda cs: tuple(sorted(cs, key=lambda c: list(Mechanism).index(c.mechanism))))
acls = st.builds(
    Acl,
    names,
    st.sampled_from(ResourceType),
    st.sampled_from(PatternType),
    names,
    st.sampled_from(Operation),
    st.sampled_from(Permission),
)
filters = st.builds(
    AclFilter,
    st.none() | names,
    st.none() | st.sampled_from(ResourceType),
    st.none() | st.sampled_from([*PatternType, MATCH]),
    st.none() | names,
    st.none() | st.sampled_from(Operation),
    st.none() | st.sampled_from(Permission),
)
users = st.builds(
    UserInfo, names, st.lists(st.sampled_from(Mechanism), max_size=2).map(tuple), st.booleans()
)


def _alter(upserts: tuple[ScramCredential, ...]) -> st.SearchStrategy[sf.UsersRequest]:
    """A USERS alter upserting `upserts` and removing some other mechanisms
    (at least one thing to do)."""
    others = [m for m in Mechanism if m not in {c.mechanism for c in upserts}]
    removed = (
        st.lists(st.sampled_from(others), min_size=0 if upserts else 1, unique=True).map(tuple)
        if others
        else st.just(())
    )
    return st.builds(
        sf.UsersRequest, st.just(sf.UserAction.ALTER), names, st.just(upserts), removed=removed
    )


REQUESTS: list[st.SearchStrategy[Any]] = [
    st.builds(sf.AuthenticateRequest, names, st.binary(max_size=200)),
    st.one_of(
        st.builds(sf.UsersRequest, st.just(sf.UserAction.LIST)),
        st.builds(sf.UsersRequest, st.just(sf.UserAction.DELETE), names),
        st.builds(
            sf.UsersRequest,
            st.sampled_from([sf.UserAction.CREATE, sf.UserAction.SET_PASSWORD]),
            names,
            credentials,
            st.booleans(),
        ),
        (st.just(()) | credentials).flatmap(_alter),
    ),
    st.one_of(
        st.builds(
            sf.AclsRequest,
            st.just(sf.AclAction.ADD),
            st.lists(acls, min_size=1, max_size=sf.ACLS_PER_REQUEST_MAX).map(tuple),
        ),
        st.builds(
            sf.AclsRequest,
            st.sampled_from([sf.AclAction.REMOVE, sf.AclAction.LIST]),
            filter=filters,
        ),
    ),
]
RESPONSES: list[st.SearchStrategy[Any]] = [
    st.builds(sf.AuthenticateResponse, st.binary(max_size=200), st.booleans()),
    st.builds(sf.UsersResponse, st.lists(users, max_size=4).map(tuple)),
    st.builds(sf.AclsResponse, st.lists(acls, max_size=4).map(tuple)),
]
