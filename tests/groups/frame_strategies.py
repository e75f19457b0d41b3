"""Hypothesis strategies for the group ops' frames (`laminar.groups.frames`)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from laminar.groups import frames as g
from laminar.groups.errors import GroupError
from laminar.groups.messages import (
    AdminAnswer,
    CommitAnswer,
    CommitRequest,
    DescribeAnswer,
    GroupView,
    HeartbeatAnswer,
    HeartbeatRequest,
    ListAnswer,
    MemberView,
    Position,
    PositionsAnswer,
)
from laminar.wire import TopicInfo

u32 = st.integers(0, 2**32 - 1)
epochs = st.integers(-2, 2**32 - 1)
"""Member epochs: the leaves are -1 and -2."""
u64 = st.integers(0, 2**64 - 1)
pids = u64
names = st.text(max_size=20)
errors = st.sampled_from(GroupError)
parts = st.frozensets(st.tuples(names, u32), max_size=4)
ms = st.integers(0, 2**32 - 1).map(lambda v: v / 1000)
positions = st.dictionaries(
    st.tuples(names, u32), st.builds(Position, u64, names, u32, u64), max_size=3
)
members = st.builds(
    MemberView,
    names,
    st.none() | names,
    u32,
    st.lists(names, max_size=3).map(tuple),
    parts,
    parts,
    parts,
    st.booleans(),
    parts,
)
views = st.builds(GroupView, names, u32, names, st.lists(members, max_size=2).map(tuple), positions)


def _frame(cls: type[g.GroupMessage], body: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, pids, body)


REQUESTS: list[st.SearchStrategy[Any]] = [
    st.builds(g.FindCoordinatorRequest, names),
    _frame(
        g.HeartbeatFrame,
        st.builds(
            HeartbeatRequest,
            names,
            st.none() | names,
            epochs,
            u32,
            st.none() | names,
            st.lists(names, max_size=3).map(tuple),
            parts,
            ms,
            st.none() | names,
            parts,
        ),
    ),
    _frame(
        g.CommitFrame,
        st.builds(CommitRequest, names, names, u32, st.dictionaries(st.tuples(names, u32), u64)),
    ),
    _frame(g.PositionsFrame, st.builds(g.PositionsQuery, names, st.none() | parts)),
    _frame(g.DescribeFrame, names),
    _frame(g.ListFrame, st.none()),
    _frame(
        g.ResetFrame,
        st.builds(g.PositionsReset, names, st.dictionaries(st.tuples(names, u32), st.none() | u64)),
    ),
    _frame(g.DeleteFrame, names),
]
RESPONSES: list[st.SearchStrategy[Any]] = [
    st.builds(TopicInfo, names, u32, st.integers(1, 2**32)).flatmap(
        lambda t: st.builds(
            g.FindCoordinatorResponse, names, st.just(t), st.integers(0, t.partitions - 1)
        )
    ),
    _frame(
        g.HeartbeatAnswerFrame,
        st.builds(  # a leave's answer echoes its epoch (-1, -2)
            HeartbeatAnswer, errors, st.just(0), st.none() | names, epochs, u32, parts, ms
        ),
    ),
    _frame(
        g.CommitAnswerFrame,
        st.builds(CommitAnswer, errors, st.just(0), st.dictionaries(st.tuples(names, u32), errors)),
    ),
    _frame(g.PositionsAnswerFrame, st.builds(PositionsAnswer, errors, st.just(0), positions)),
    _frame(g.DescribeAnswerFrame, st.builds(DescribeAnswer, errors, st.just(0), st.none() | views)),
    _frame(
        g.ListAnswerFrame,
        st.builds(ListAnswer, errors, st.just(0), st.lists(views, max_size=2).map(tuple)),
    ),
    _frame(g.ResetAnswerFrame, st.builds(AdminAnswer, errors, st.just(0))),
    _frame(g.DeleteAnswerFrame, st.builds(AdminAnswer, errors, st.just(0))),
]
