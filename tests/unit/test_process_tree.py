"""Which processes lie below a pool child: the parent links, followed down."""

from __future__ import annotations

from django_strait.worker.process.tree import descendants


def test_descendants__follow_parent_links_down_through_every_generation():
    parent_of = {10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}

    assert descendants(10, parent_of) == {11, 12, 13}


def test_descendants__a_process_adopted_by_the_root_is_below_it():
    # A double-forked daemon whose parent exited: re-parented to the subreaper (10).
    assert descendants(10, {10: 1, 30: 10, 31: 30}) == {30, 31}


def test_descendants__none_for_a_root_without_children_and_never_the_root_itself():
    assert descendants(10, {10: 1, 20: 1}) == set()
    assert descendants(10, {10: 10, 11: 10}) == {11}
