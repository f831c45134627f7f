"""Layout digests and the mismatch messages every rank raises."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mwms_mpi.collective.agreement import check_mode
from mwms_mpi.collective.signature import (
    ANY,
    Layout,
    Signature,
    describe,
    digest,
    mismatch_message,
)


def _calls(*layouts: Layout, call: int = 1) -> list[Signature]:
    return [Signature(call, layout, None, "") for layout in layouts]


def test_digest_is_stable_across_processes() -> None:
    layout = Layout("all_reduce", "SUM", (("float32", (3, 4)),))
    code = (
        "from mwms_mpi.collective.signature import Layout, digest;"
        "print(digest(Layout('all_reduce', 'SUM', (('float32', (3, 4)),))))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert int(other.stdout) == digest(layout)
    assert 0 <= digest(layout) < 2**56


def test_digest_separates_layouts() -> None:
    a = Layout("all_reduce", "SUM", (("float32", (3, 4)),))
    assert digest(a) != digest(a._replace(op="MAX"))
    assert digest(a) != digest(a._replace(items=(("float32", (4, 3)),)))
    assert digest(a) != digest(a._replace(kind="broadcast"))


def test_message_names_op_ranks_and_shapes() -> None:
    mine = Layout("all_reduce", "SUM", (("float32", (3, 4)),))
    theirs = mine._replace(items=(("float32", (3, 5)),))
    text = mismatch_message("all_reduce", 2, _calls(mine, mine, theirs, call=12), "c0")
    assert text.startswith(
        "all_reduce on rank 2: shape (3, 5) float32 != (3, 4) float32 on rank 0 "
        "(call 12 on communicator c0"
    )
    assert "ranks [0, 1]" in text and "ranks [2]" in text
    # a rank that agrees with rank 0 is compared with the first rank that differs
    text = mismatch_message("all_reduce", 0, _calls(mine, mine, theirs, call=12), "c0")
    assert "shape (3, 4) float32 != (3, 5) float32 on rank 2" in text


def test_message_for_kind_op_count_dtype_and_extra() -> None:
    base = Layout(
        "batch_all_reduce", "SUM", (("float32", (2,)), ("int64", (3,))), (("bytes_per_pack", 0),)
    )
    cases = {
        base._replace(kind="broadcast"): "collective batch_all_reduce != broadcast",
        base._replace(op="MAX"): "op SUM != MAX",
        base._replace(items=base.items[:1]): "2 arrays != 1 arrays",
        base._replace(
            items=(("float32", (2,)), ("int32", (3,)))
        ): "array 1: dtype (3,) int64 != (3,) int32",
        base._replace(extra=(("bytes_per_pack", 8),)): "bytes_per_pack 0 != 8",
    }
    for other, expected in cases.items():
        text = mismatch_message("batch_all_reduce", 0, _calls(base, other), "c")
        assert expected in text, expected


def test_message_names_what_the_user_called() -> None:
    layout = Layout("all_reduce", "SUM", (("float32", (4,)),))
    mine = Signature(3, layout, ("Strategy.reduce", "SUM", "", "", "", ""), "")
    theirs = mine._replace(context=("Strategy.reduce", "MEAN", "", "", "", ""))
    text = mismatch_message("Strategy.reduce", 0, [mine, theirs], "s")
    assert text.startswith("Strategy.reduce on rank 0: op SUM != MEAN on rank 1 (call 3 ")
    assert "Strategy.reduce(SUM) -> all_reduce SUM [(4,) float32]" in text
    axis = mismatch_message(
        "Strategy.reduce",
        1,
        [mine, mine._replace(context=("Strategy.reduce", "SUM", "0", "", "", ""))],
        "s",
    )
    assert "axis 0 != (none) on rank 0" in axis


def test_message_names_a_rank_whose_arguments_were_invalid() -> None:
    layout = Layout("broadcast", "", (("float64", (2,)),), (("root", 0),))
    valid = Signature(1, layout, None, "")
    invalid = Signature(1, None, None, "ValueError: root 5 is not a rank")
    text = mismatch_message("broadcast", 0, [valid, invalid], "c")
    assert text.startswith(
        "broadcast on rank 0: valid arguments (broadcast [(2,) float64] root=0) != "
        "ValueError: root 5 is not a rank on rank 1"
    )


def test_describe_marks_free_dimensions() -> None:
    layout = Layout("all_gather", "", (("int32", (ANY, 3)),), (("axis", 0),))
    assert describe(layout) == "all_gather [(*, 3) int32] axis=0"


def test_message_names_host_and_device_arrays() -> None:
    host = Layout("all_reduce", "SUM", (("float32", (4,)),))
    device = host._replace(extra=(("arrays", "cupy"), ("transport", "nccl")))
    text = mismatch_message("all_reduce", 1, _calls(host, device), "c")
    assert "all_reduce on rank 1: arrays cupy != numpy on rank 0" in text
    assert "arrays=cupy transport=nccl" in text  # the listing names each rank's layout
    staged = host._replace(extra=(("arrays", "cupy"), ("transport", "staging")))
    assert "transport staging != nccl" in mismatch_message("x", 0, _calls(staged, device), "c")
    assert digest(host) != digest(device) != digest(staged)


def _context(api: str, structure: str = "", site: str = "", op: str = "SUM") -> tuple[str, ...]:
    return (api, op, "", "", structure, site)


def test_message_names_both_structures() -> None:
    layout = Layout("batch_all_reduce", "SUM", (("float32", (3,)), ("float32", (3,))))
    mine = Signature(2, layout, _context("ReplicaContext.all_reduce", "{'a': ., 'b': .}"), "")
    theirs = mine._replace(context=_context("ReplicaContext.all_reduce", "{'a': ., 'c': .}"))
    text = mismatch_message("ReplicaContext.all_reduce", 1, [mine, theirs], "s")
    assert text.startswith(
        "ReplicaContext.all_reduce on rank 1: structure {'a': ., 'c': .} != {'a': ., 'b': .} "
        "on rank 0 (call 2 "
    )
    assert "ReplicaContext.all_reduce(SUM, structure={'a': ., 'b': .}) -> batch_all_reduce" in text
    one = mine._replace(context=_context("Strategy.reduce", ""))
    sparse = mine._replace(context=_context("Strategy.reduce", "IndexedSlices"))
    text = mismatch_message("Strategy.reduce", 0, [one, sparse], "s")
    assert "structure (a single dense value) != IndexedSlices on rank 1" in text


def test_long_structures_are_cut_around_their_first_difference() -> None:
    layout = Layout("batch_all_reduce", "SUM", (("float32", (3,)),))
    many = "[" + ", ".join(["."] * 300)
    mine = Signature(1, layout, _context("X", many + ", .]"), "")
    theirs = mine._replace(context=_context("X", many + ", IndexedSlices]"))
    text = mismatch_message("X", 0, [mine, theirs], "s")
    head = text.split(" (call 1 ")[0]
    mine_text, theirs_text = head.split(": structure ", 1)[1].split(" != ")
    assert mine_text.startswith("...") and mine_text.endswith(", ., .]")
    assert theirs_text.startswith("...") and theirs_text.endswith(", ., IndexedSlices] on rank 1")
    assert len(head) < 600  # the listing is cut too
    assert len(text) < 1200


def test_message_names_each_ranks_api_in_rank_order() -> None:
    layout = Layout("all_reduce", "SUM", (("float32", ()),))
    read = Signature(4, layout, _context("SyncOnRead read of `accuracy`"), "")
    reduce = read._replace(context=_context("Strategy.reduce"))
    want = "ranks called different APIs: SyncOnRead read of `accuracy` on rank 0, "
    for rank in (0, 1):
        text = mismatch_message("x", rank, [read, reduce], "s")
        assert want + "Strategy.reduce on rank 1 (call 4 " in text, text
    text = mismatch_message("x", 2, [read, read, reduce], "s")
    assert want + "Strategy.reduce on rank 2" in text
    assert "SyncOnRead read of `accuracy` (SUM) -> all_reduce SUM [() float32]" in text


def test_message_names_both_call_sites() -> None:
    layout = Layout("all_reduce", "SUM", (("float32", (2,)),))
    mine = Signature(1, layout, _context("Strategy.reduce", site="train.py:10"), "")
    theirs = mine._replace(context=_context("Strategy.reduce", site="train.py:12"))
    text = mismatch_message("Strategy.reduce", 0, [mine, theirs], "s")
    assert "call site train.py:10 != train.py:12 on rank 1" in text
    assert "Strategy.reduce(SUM, at train.py:10)" in text
    bare = Signature(1, layout, ("", "", "", "", "", "a.py:3"), "")
    text = mismatch_message(
        "all_reduce", 0, [bare, bare._replace(context=("", "", "", "", "", "a.py:4"))], "s"
    )
    assert "call site a.py:3 != a.py:4 on rank 1" in text


def test_check_modes() -> None:
    assert check_mode({}) == "always"
    assert check_mode({"MWMS_MPI_CHECK": " CallSite "}) == "callsite"
    assert check_mode({"MWMS_MPI_CHECK": "first"}) == "first"
    with pytest.raises(
        ValueError,
        match="Environment variable MWMS_MPI_CHECK='sites' is not one of always, first, callsite",
    ):
        check_mode({"MWMS_MPI_CHECK": "sites"})
