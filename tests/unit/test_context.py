"""The per-thread context stack: nesting, restore on error, per-thread isolation, lazy default."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import threading
from collections.abc import Iterator

import pytest

from mwms_mpi import _context
from mwms_mpi._context import ContextEntry

A = ContextEntry("strategy-a", "strategy-a", None)
B = ContextEntry("strategy-b", None, "replica-b0")
C = ContextEntry("strategy-c", "strategy-c", None)
DEFAULT = ContextEntry("default-strategy", None, "default-replica")


@pytest.fixture(autouse=True)
def _isolated_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Whatever the distribute layer registered comes back after each test.
    monkeypatch.setattr(_context, "_default_factory", None)
    monkeypatch.setattr(_context, "_default_entry", None)
    assert _context.stack() == ()
    yield
    assert _context.stack() == (), "a test left entries on the stack"


def test_no_default_registered_gives_all_none() -> None:
    assert _context.current() == ContextEntry(None, None, None)
    assert _context.get_default() == ContextEntry(None, None, None)


def test_default_is_built_lazily_once() -> None:
    built: list[int] = []

    def factory() -> ContextEntry:
        built.append(1)
        return DEFAULT

    _context.set_default_factory(factory)
    assert built == []
    assert _context.current() is DEFAULT
    assert _context.current() is DEFAULT
    assert built == [1]
    # Registering again drops the built default.
    _context.set_default_factory(lambda: A)
    assert _context.current() is A
    _context.set_default_factory(None)
    assert _context.current() == ContextEntry(None, None, None)


def test_default_built_once_under_concurrency() -> None:
    built: list[int] = []
    barrier = threading.Barrier(8)

    def factory() -> ContextEntry:
        built.append(1)
        return DEFAULT

    _context.set_default_factory(factory)
    seen: list[ContextEntry] = []

    def work() -> None:
        barrier.wait()
        seen.append(_context.current())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [1]
    assert seen == [DEFAULT] * 8


def test_factory_that_asks_for_the_default_fails_clearly() -> None:
    _context.set_default_factory(_context.current)
    with pytest.raises(RuntimeError, match="requested while being built"):
        _context.current()
    # Not left half-built: a good factory works afterwards.
    _context.set_default_factory(lambda: DEFAULT)
    assert _context.current() is DEFAULT


def test_scope_nests_and_restores() -> None:
    _context.set_default_factory(lambda: DEFAULT)
    assert _context.current() is DEFAULT
    with _context.scope(A) as entered:
        assert entered is A
        assert _context.current() is A
        with _context.scope(B):
            assert _context.current() is B
            assert _context.stack() == (A, B)
            with _context.scope(A):
                assert _context.stack() == (A, B, A)
            assert _context.current() is B
        assert _context.current() is A
    assert _context.current() is DEFAULT
    assert _context.stack() == ()


def test_exception_restores_every_level() -> None:
    with _context.scope(A):
        with pytest.raises(KeyError), _context.scope(B), _context.scope(C):
            raise KeyError("boom")
        assert _context.stack() == (A,)
    assert _context.stack() == ()


def test_scope_restores_even_after_a_leaked_push() -> None:
    # A callee that pushes without resetting cannot leave its entry behind the scope.
    with _context.scope(A):
        _context.push(B)
        _context.push(C)
        assert _context.current() is C
    assert _context.stack() == ()


def test_push_and_reset_tokens() -> None:
    token_a = _context.push(A)
    token_b = _context.push(B)
    assert token_a == () and token_b == (A,)
    assert _context.current() is B
    _context.reset(token_b)
    assert _context.current() is A
    _context.reset(token_a)
    assert _context.stack() == ()


def test_reset_to_an_outer_token_drops_inner_entries() -> None:
    token = _context.push(A)
    _context.push(B)
    _context.push(C)
    _context.reset(token)
    assert _context.stack() == ()


def test_new_thread_sees_the_default_not_the_parents_scope() -> None:
    _context.set_default_factory(lambda: DEFAULT)
    seen: list[ContextEntry] = []
    with _context.scope(A):
        thread = threading.Thread(target=lambda: seen.append(_context.current()))
        thread.start()
        thread.join()
    assert seen == [DEFAULT]


def test_threads_have_their_own_stacks() -> None:
    # Each replica thread enters its own entry; none sees another's, while all are inside.
    entries = [ContextEntry("s", None, f"replica-{i}") for i in range(4)]
    inside = threading.Barrier(4)
    seen: dict[int, tuple[ContextEntry, ...]] = {}

    def replica(i: int) -> None:
        with _context.scope(entries[i]):
            inside.wait()
            seen[i] = _context.stack()
            inside.wait()
        seen[i + 10] = _context.stack()

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(4)]
    with _context.scope(A):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert _context.stack() == (A,)
    for i in range(4):
        assert seen[i] == (entries[i],)
        assert seen[i + 10] == ()


def test_thread_scope_installs_a_parent_stack() -> None:
    seen: list[tuple[ContextEntry, ...]] = []
    with _context.scope(A), _context.scope(B):
        parent = _context.stack()

        def child() -> None:
            with _context.thread_scope(parent):
                seen.append(_context.stack())
                with _context.scope(C):
                    seen.append(_context.stack())
                seen.append(_context.stack())
            seen.append(_context.stack())

        thread = threading.Thread(target=child)
        thread.start()
        thread.join()
        # The child's scopes never touched the parent's stack.
        assert _context.stack() == (A, B)
    assert seen == [(A, B), (A, B, C), (A, B), ()]


def test_thread_scope_restores_on_error() -> None:
    with _context.scope(A):
        with pytest.raises(ValueError), _context.thread_scope((B, C)):
            assert _context.current() is C
            raise ValueError
        assert _context.stack() == (A,)


def test_entry_is_frozen_and_compares_by_value() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        A.strategy = "other"  # type: ignore[misc]
    assert ContextEntry("strategy-a", "strategy-a", None) == A
    assert [f.name for f in dataclasses.fields(ContextEntry)] == [
        "strategy",
        "cross_replica_context",
        "replica_context",
        "default_scope",
    ]


def test_module_imports_nothing_from_mwms_mpi() -> None:
    source = pathlib.Path(_context.__file__).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.module is not None and not node.module.startswith("mwms_mpi")
            assert node.level == 0
        elif isinstance(node, ast.Import):
            assert all(not alias.name.startswith("mwms_mpi") for alias in node.names)
