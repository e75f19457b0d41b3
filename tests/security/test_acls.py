"""ACLs: Kafka's semantics case by case, a brute-force reference model as the
oracle on random ACL sets, and the decision cache against every change."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.security.acls import (
    ACLS_PER_CHANGE_MAX,
    CLUSTER,
    MATCH,
    Acl,
    AclFilter,
    AclSet,
    AddAcls,
    Operation,
    PatternType,
    Permission,
    RemoveAcls,
    Resource,
    ResourceType,
    decode_entry,
    encode_entry,
)
from laminar.security.errors import Refusal, SecurityRefusal

ALLOW, DENY = Permission.ALLOW, Permission.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
READ, WRITE, DESCRIBE, CREATE, ALL = (
    Operation.READ,
    Operation.WRITE,
    Operation.DESCRIBE,
    Operation.CREATE,
    Operation.ALL,
)
ALICE = "User:alice"
REQUESTED = [op for op in Operation if op is not ALL]


def topic(name: str) -> Resource:
    return Resource(TOPIC, name)


def acl(
    operation: Operation = READ,
    name: str = "events",
    *,
    permission: Permission = ALLOW,
    principal: str = ALICE,
    pattern: PatternType = LITERAL,
    kind: ResourceType = TOPIC,
) -> Acl:
    return Acl(principal, kind, pattern, name, operation, permission)


def acl_set(*acls: Acl, superusers: tuple[str, ...] = ()) -> AclSet:
    acls_ = AclSet()
    acls_.apply(acls_.plan_add(acls))
    acls_.set_superusers(superusers)
    return acls_


def applies(a: Acl, resource: Resource) -> bool:
    """Does ACL `a`'s pattern cover `resource`?"""
    if a.resource_type is not resource.type:
        return False
    if a.pattern is LITERAL:
        return a.name in (resource.name, "*")
    return resource.name.startswith(a.name)


def reference(
    acls: tuple[Acl, ...] | list[Acl],
    superusers: frozenset[str],
    principal: str,
    operation: Operation,
    resource: Resource,
) -> bool:
    """Kafka's rule written the plain way: every ACL looked at, one by one."""
    if principal in superusers:
        return True
    relevant = [a for a in acls if a.principal in (principal, "User:*") and applies(a, resource)]
    if any(a.permission is DENY and a.operation in (operation, ALL) for a in relevant):
        return False
    implied = {operation}
    if operation is DESCRIBE:
        implied |= {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    return any(
        a.permission is ALLOW and (a.operation is ALL or a.operation in implied) for a in relevant
    )


# -- Kafka's semantics, case by case ------------------------------------------------------


def test_no_acl_means_denied() -> None:
    assert not AclSet().authorize(ALICE, READ, topic("events"))


def test_literal_prefixed_and_any_name_patterns() -> None:
    acls = acl_set(
        acl(READ, "events"),
        acl(WRITE, "logs-", pattern=PREFIXED),
        acl(CREATE, "*"),
    )
    assert acls.authorize(ALICE, READ, topic("events"))
    assert not acls.authorize(ALICE, READ, topic("events2"))  # literal is exact
    assert acls.authorize(ALICE, WRITE, topic("logs-app"))
    assert acls.authorize(ALICE, WRITE, topic("logs-"))
    assert not acls.authorize(ALICE, WRITE, topic("logs"))
    assert acls.authorize(ALICE, CREATE, topic("anything"))
    assert not acls.authorize(ALICE, CREATE, Resource(GROUP, "anything"))  # types never cross


def test_wildcard_principal_matches_everyone() -> None:
    acls = acl_set(acl(READ, principal="User:*"))
    assert acls.authorize("User:bob", READ, topic("events"))
    assert not acls.authorize("User:bob", WRITE, topic("events"))


def test_deny_wins_over_allow_and_all() -> None:
    acls = acl_set(acl(ALL), acl(WRITE, "*", permission=DENY, principal="User:*"))
    assert acls.authorize(ALICE, READ, topic("events"))
    assert not acls.authorize(ALICE, WRITE, topic("events"))


@pytest.mark.parametrize("operation", [Operation.READ, WRITE, Operation.DELETE, Operation.ALTER])
def test_read_write_delete_alter_allow_describe(operation: Operation) -> None:
    assert acl_set(acl(operation)).authorize(ALICE, DESCRIBE, topic("events"))


def test_create_does_not_allow_describe_and_describe_allows_nothing_else() -> None:
    assert not acl_set(acl(CREATE)).authorize(ALICE, DESCRIBE, topic("events"))
    assert not acl_set(acl(DESCRIBE)).authorize(ALICE, READ, topic("events"))


def test_a_deny_denies_its_own_operation_only() -> None:
    acls = acl_set(acl(ALL), acl(READ, permission=DENY))
    assert not acls.authorize(ALICE, READ, topic("events"))
    assert acls.authorize(ALICE, DESCRIBE, topic("events"))  # deny read does not hide it
    assert not acl_set(acl(ALL), acl(ALL, permission=DENY)).authorize(
        ALICE, DESCRIBE, topic("events")
    )


def test_superusers_may_do_anything_even_against_a_deny() -> None:
    acls = acl_set(acl(ALL, "*", permission=DENY, principal="User:*"), superusers=("User:root",))
    assert acls.authorize("User:root", Operation.DELETE, topic("events"))
    assert acls.authorize("User:root", CREATE, CLUSTER)
    assert not acls.authorize(ALICE, READ, topic("events"))


def test_a_request_names_one_operation() -> None:
    with pytest.raises(ValueError):
        AclSet().authorize(ALICE, ALL, topic("events"))


# -- planning and its refusals --------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        acl(principal="alice"),
        acl(principal="Group:ops"),
        acl(principal="User:"),
        acl(name=""),
        acl(name="x" * 256),
        acl(name="events\n"),
        acl(CREATE, "my-cluster", kind=ResourceType.CLUSTER),
    ],
)
def test_invalid_acls_are_refused(bad: Acl) -> None:
    with pytest.raises(SecurityRefusal) as refused:
        AclSet().plan_add([bad])
    assert refused.value.refusal is Refusal.INVALID


def test_adding_twice_and_removing_what_is_not_there_are_no_ops() -> None:
    acls = acl_set(acl(READ))
    assert acls.plan_add([acl(READ), acl(WRITE), acl(WRITE)]) == AddAcls((acl(WRITE),))
    assert acls.plan_remove([acl(READ), acl(CREATE)]) == RemoveAcls((acl(READ),))
    assert not acls.apply(AddAcls((acl(READ),)))


def test_bounds_on_the_set_and_on_one_change() -> None:
    acls = acl_set(acl(READ), acl(WRITE))
    acls.max_acls = 3
    with pytest.raises(SecurityRefusal) as refused:
        acls.plan_add([acl(CREATE), acl(DESCRIBE)])
    assert refused.value.refusal is Refusal.LIMIT
    acls.apply(AddAcls((acl(CREATE), acl(DESCRIBE))))  # planned elsewhere: applied up to the bound
    assert len(acls) == 3 and acl(DESCRIBE) not in acls
    many = [acl(READ, f"t{i}") for i in range(ACLS_PER_CHANGE_MAX + 1)]
    with pytest.raises(SecurityRefusal):
        AclSet(max_acls=10**6).plan_add(many)


def test_entries_round_trip_and_foreign_bytes_decode_to_nothing() -> None:
    entry = AddAcls(
        (
            acl(READ),
            acl(ALL, "ev", permission=DENY, pattern=PREFIXED),
            acl(CREATE, "kafka-cluster", kind=ResourceType.CLUSTER),
        )
    )
    assert decode_entry(encode_entry(entry)) == entry
    assert decode_entry(encode_entry(RemoveAcls(entry.acls))) == RemoveAcls(entry.acls)
    for foreign in (
        b"",
        b"\xc1",
        b"\x93\x01\x02\x03",
        encode_entry(AddAcls(())).replace(b"acl_add", b"acl_xxx"),
    ):
        assert decode_entry(foreign) is None


def test_filters_select_as_describe_and_delete_acls_do() -> None:
    every = (
        acl(READ, "events"),
        acl(WRITE, "ev", pattern=PREFIXED),
        acl(CREATE, "*", principal="User:*"),
        acl(READ, "events", kind=GROUP, permission=DENY),
    )
    acls = acl_set(*every)
    assert acls.select(AclFilter()) == acls.acls()
    assert acls.select(AclFilter(name="events")) == (every[3], every[0])
    assert acls.select(AclFilter(resource_type=TOPIC, pattern=MATCH, name="events")) == (
        every[2],
        every[0],
        every[1],
    )
    assert acls.select(AclFilter(principal="User:*")) == (every[2],)  # exact, not a wildcard
    assert acls.select(AclFilter(pattern=PREFIXED)) == (every[1],)
    assert acls.select(AclFilter(permission=DENY, operation=READ)) == (every[3],)
    acls.apply(acls.plan_remove(acls.select(AclFilter(resource_type=TOPIC))))
    assert acls.acls() == (every[3],)


# -- the reference model as oracle ------------------------------------------------------

NAMES = st.sampled_from(["a", "ab", "abc", "b", "ba", "*"])
PRINCIPALS = st.sampled_from([ALICE, "User:bob", "User:*"])
ACLS = st.builds(
    Acl,
    PRINCIPALS,
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from(list(PatternType)),
    NAMES,
    st.sampled_from(list(Operation)),
    st.sampled_from(list(Permission)),
)
QUERIES = st.tuples(
    st.sampled_from([ALICE, "User:bob", "User:carol"]),
    st.sampled_from(REQUESTED),
    st.builds(
        Resource, st.sampled_from([TOPIC, GROUP]), st.sampled_from(["a", "ab", "abc", "b", "c"])
    ),
)


@given(st.lists(ACLS, max_size=12), st.lists(QUERIES, min_size=1, max_size=10))
def test_authorize_agrees_with_the_reference_model(acls: list[Acl], queries: list) -> None:
    acls_ = acl_set(*acls)
    for principal, operation, resource in queries:
        expected = reference(acls, frozenset(), principal, operation, resource)
        assert acls_.authorize(principal, operation, resource) is expected


@given(st.lists(ACLS, max_size=12), QUERIES)
def test_a_match_filter_selects_the_acls_that_apply(acls: list[Acl], query: tuple) -> None:
    _, _, resource = query
    wanted = AclFilter(resource_type=resource.type, pattern=MATCH, name=resource.name)
    assert set(acl_set(*acls).select(wanted)) == {a for a in acls if applies(a, resource)}


@given(st.lists(ACLS, max_size=12), QUERIES, st.booleans(), st.booleans())
def test_a_matching_deny_always_wins(
    acls: list[Acl], query: tuple, any_principal: bool, any_operation: bool
) -> None:
    principal, operation, resource = query
    acls_ = acl_set(*acls)
    deny = Acl(
        "User:*" if any_principal else principal,
        resource.type,
        LITERAL,
        resource.name,
        ALL if any_operation else operation,
        DENY,
    )
    acls_.authorize(principal, operation, resource)  # cached before the change
    acls_.apply(acls_.plan_add([deny]))
    assert not acls_.authorize(principal, operation, resource)


@given(st.lists(ACLS, max_size=12), st.lists(QUERIES, min_size=1, max_size=10))
def test_removing_every_acl_denies_everything(acls: list[Acl], queries: list) -> None:
    acls_ = acl_set(*acls)
    for query in queries:
        acls_.authorize(*query)
    acls_.apply(acls_.plan_remove(acls_.acls()))
    assert len(acls_) == 0
    assert not any(acls_.authorize(*query) for query in queries)


@pytest.mark.parametrize(
    ("change", "read_write_after"),
    [
        (lambda acls: acls.apply(AddAcls((acl(READ),))), (True, True)),
        (lambda acls: acls.apply(RemoveAcls((acl(WRITE),))), (False, False)),
        (lambda acls: acls.restore([acl(READ)]), (True, False)),
        (lambda acls: acls.set_superusers([ALICE]), (True, True)),
    ],
    ids=["add", "remove", "restore", "superusers"],
)
def test_every_kind_of_change_drops_cached_decisions(
    change: Callable[[AclSet], None], read_write_after: tuple[bool, bool]
) -> None:
    acls = acl_set(acl(WRITE))
    events = topic("events")
    assert (acls.authorize(ALICE, READ, events), acls.authorize(ALICE, WRITE, events)) == (
        False,
        True,
    )  # both cached now
    change(acls)
    after = (acls.authorize(ALICE, READ, events), acls.authorize(ALICE, WRITE, events))
    assert after == read_write_after


CHANGES = st.one_of(
    st.tuples(st.just("add"), ACLS),
    st.tuples(st.just("remove"), ACLS),
    st.tuples(st.just("superusers"), st.frozensets(st.sampled_from([ALICE, "User:bob"]))),
    st.tuples(st.just("restore"), st.lists(ACLS, max_size=4)),
    st.tuples(st.just("ask"), QUERIES),
)


@given(st.lists(CHANGES, max_size=40), st.integers(1, 4))
def test_the_cache_never_answers_from_before_the_last_change(steps: list, cache_max: int) -> None:
    """Every query asked so far is asked again after each step: a decision
    cached before a change must not come back after it."""
    acls_ = AclSet(cache_max=cache_max)
    superusers: frozenset[str] = frozenset()
    asked: list[tuple[str, Operation, Resource]] = []
    for kind, arg in steps:
        if kind == "add":
            acls_.apply(AddAcls((arg,)))
        elif kind == "remove":
            acls_.apply(RemoveAcls((arg,)))
        elif kind == "superusers":
            acls_.set_superusers(arg)
            superusers = arg
        elif kind == "restore":
            acls_.restore(arg)
        else:
            asked.append(arg)
        for query in asked:
            assert acls_.authorize(*query) is reference(acls_.acls(), superusers, *query)
        assert len(acls_._cache) <= cache_max
