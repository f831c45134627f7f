"""The ``tf.nest`` subset that reductions and replica results need, with TF's order and errors."""

from __future__ import annotations

import collections
import collections.abc as abc
import enum
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = [
    "assert_same_structure",
    "describe",
    "flatten",
    "is_nested",
    "map_structure",
    "pack_sequence_as",
]


class Composite(Protocol):
    """A composite (``IndexedSlices``) for ``expand_composites``, as TF's ``CompositeTensor``:
    a hook, nest (layer 0) imports no values (``docs/architecture.md``, "Layers").
    ``_nest_components``: TF's ``_to_components``, in TF's order; ``_nest_from_components``:
    the inverse; ``_nest_type_spec``: (key, TF's ``TypeSpec`` text); equal keys match."""

    def _nest_components(self) -> list[Any]: ...
    @classmethod
    def _nest_from_components(cls, components: list[Any]) -> Any: ...
    def _nest_type_spec(self) -> tuple[Any, str]: ...


# What a type is to nest, decided once per type (isinstance against the ABCs is slow).
_LEAF = 0
_SEQ = 1  # list, tuple and other Sequences: children in iteration order
_NAMEDTUPLE = 2  # children in field order; packed back with type(x)(*args)
_MAP = 3  # Mappings: children in sorted-key order, as TF does (never hash or insertion order)
_VIEW = 4  # mapping views: children in iteration order; packed back into a list
_ATTRS = 5  # attrs classes: ``__attrs_attrs__`` fields in definition order; type(x)(*args)
_CUSTOM = 6  # TF's CustomNestProtocol: ``__tf_flatten__()[1]``; ``__tf_unflatten__`` packs
_COMPOSITE = 7  # a Composite: an atom, unless expand_composites (then one child, its components)

_KIND: dict[type, int] = {list: _SEQ, tuple: _SEQ, dict: _MAP}
_KIND.update(dict.fromkeys((type(None), bool, int, float, complex, str, bytes), _LEAF))
_KIND_CACHE_LIMIT = 4096  # classes made on the fly (namedtuples in a loop) must not grow it forever
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def _classify(cls: type) -> int:
    # TF's IsNestedHelper: Mappings, mapping views, attrs classes, TF's CustomNestProtocol (both
    # methods) and Sequences but str/bytes are nested; the rest (sets, arrays, None) are leaves.
    if issubclass(cls, abc.Mapping):
        return _MAP
    if issubclass(cls, abc.MappingView):
        return _VIEW
    if hasattr(cls, "__attrs_attrs__"):
        return _ATTRS
    if hasattr(cls, "__tf_flatten__") and hasattr(cls, "__tf_unflatten__"):
        return _CUSTOM
    if issubclass(cls, tuple):
        fields = getattr(cls, "_fields", None)
        if isinstance(fields, abc.Sequence) and all(isinstance(f, str) for f in fields):
            return _NAMEDTUPLE
        return _SEQ
    if issubclass(cls, abc.Sequence) and not issubclass(cls, (str, bytes)):
        return _SEQ
    return _COMPOSITE if hasattr(cls, "_nest_components") else _LEAF


def _kind(value: Any, expand: bool = False) -> int:
    cls = type(value)
    kind = _KIND.get(cls)
    if kind is None:
        kind = _classify(cls)
        if len(_KIND) < _KIND_CACHE_LIMIT:
            _KIND[cls] = kind
    return _LEAF if kind == _COMPOSITE and not expand else kind


def _sorted_keys(mapping: Any, for_pack: bool = False) -> list[Any]:
    # TF's C++ flatten lets the comparison's TypeError through; its Python pack rewords it.
    if not for_pack:
        return sorted(mapping)
    try:
        return sorted(mapping)
    except TypeError:
        raise TypeError("nest only supports dicts with sortable keys.") from None


def _children(value: Any, kind: int, for_pack: bool = False) -> Iterable[Any]:
    if kind == _MAP:
        return [value[key] for key in _sorted_keys(value, for_pack)]
    if kind == _ATTRS:
        return [getattr(value, a.name) for a in type(value).__attrs_attrs__]
    if kind == _CUSTOM:
        return value.__tf_flatten__()[1]
    if kind == _COMPOSITE:
        return [list(value._nest_components())]  # one child, as TF's SingleValueIterator
    return value


def _sequence_like(instance: Any, args: list[Any]) -> Any:
    """Builds a structure of ``instance``'s type from its children ``args`` (TF's sequence_like)."""
    cls: Any = type(instance)
    if cls is list:
        return args
    if cls is tuple:
        return tuple(args)
    kind = _kind(instance, expand=True)
    if kind == _MAP:
        result = dict(zip(_sorted_keys(instance, for_pack=True), args, strict=False))
        if issubclass(cls, abc.MutableMapping):
            # Same type (and default_factory), keys in the instance's own order.
            if cls is dict:
                return {key: result[key] for key in instance}
            is_default = cls is collections.defaultdict
            packed: Any = cls(instance.default_factory) if is_default else cls()
            for key in instance:
                packed[key] = result[key]
            return packed
        try:
            return cls((key, result[key]) for key in instance)
        except TypeError as err:
            raise TypeError(
                f"Error creating an object of type {cls} like {instance}. Note that it must "
                "accept a single positional argument representing an iterable of key-value "
                f"pairs, in addition to self. Cause: {err}"
            ) from None
    if kind == _VIEW or cls is range:
        return list(args)
    if kind in (_NAMEDTUPLE, _ATTRS):
        return cls(*args)
    if kind == _CUSTOM:
        return instance.__tf_unflatten__(instance.__tf_flatten__()[0], tuple(args))
    if kind == _COMPOSITE:
        return cls._nest_from_components(args[0])
    return cls(args)


def is_nested(seq: Any) -> bool:
    """Returns true if its input is a nested structure.

    Lists, tuples (namedtuples included), dicts and other mappings, mapping views, other
    ``collections.abc.Sequence`` types except strings and bytes, attrs classes and TF's
    ``__tf_flatten__``/``__tf_unflatten__`` protocol are nested structures; anything else
    (``None``, numbers, strings, sets, numpy arrays, ``IndexedSlices``) is an atom.
    """
    return _kind(seq) != _LEAF


def flatten(structure: Any, expand_composites: bool = False) -> list[Any]:
    """Returns a flat list from a given structure.

    Dictionaries are flattened in the sorted order of their keys, whatever their insertion
    order, so that equal dicts flatten alike in every process (``OrderedDict`` too). An atom,
    ``None`` included, flattens to a one-element list.

    Args:
      structure: an atom or a nested structure. Note, numpy arrays are considered atoms.
      expand_composites: if true, an ``IndexedSlices`` is ``values, indices[, dense_shape]``.

    Returns:
      A Python list, the flattened version of the input.

    Raises:
      TypeError: The nest is or contains a dict with non-sortable keys.
    """
    expand = bool(expand_composites)
    kind = _kind(structure, expand)
    if kind == _LEAF:
        return [structure]
    flat: list[Any] = []
    append = flat.append
    kind_of = _KIND.get
    # An explicit stack of iterators instead of recursion: one Python frame for the whole walk.
    stack = [iter(_children(structure, kind))]
    while stack:
        for item in stack[-1]:
            item_kind = kind_of(type(item))
            if item_kind is None or item_kind == _COMPOSITE:
                item_kind = _kind(item, expand)
            if item_kind == _LEAF:
                append(item)
            else:
                stack.append(iter(_children(item, item_kind)))
                break
        else:
            stack.pop()
    return flat


def describe(structure: Any, leaf: Callable[[Any], str]) -> str:
    """The nested structure as text, in :func:`flatten`'s order (what a collective agrees).

    Mappings show their keys sorted (insertion order and mapping type never matter, as in
    TF), lists ``[...]``, tuples ``(...)``, namedtuples ``Name(field=...)`` by qualified name
    and fields, other sequences ``Name[...]``, each atom as ``leaf(atom)``; keys as their
    ``repr``, never an object's address. Never raises (unsortable keys keep their order).
    """
    kind = _kind(structure)
    if kind == _LEAF:
        return leaf(structure)
    if kind == _MAP:
        try:
            keys = sorted(structure)
        except TypeError:
            keys = list(structure)
        parts = (f"{_key_text(k)}: {describe(structure[k], leaf)}" for k in keys)
        return "{" + ", ".join(parts) + "}"
    items = [describe(child, leaf) for child in _children(structure, kind)]
    cls = type(structure)
    if kind == _NAMEDTUPLE:
        fields = ", ".join(f"{f}={t}" for f, t in zip(cls._fields, items, strict=False))
        return f"{cls.__qualname__}({fields})"
    if cls is list:
        return "[" + ", ".join(items) + "]"
    if cls is tuple:
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return f"{cls.__qualname__}[" + ", ".join(items) + "]"


_VALUE_KEYS = (str, bytes, int, float, complex, bool, type(None), enum.Enum)


def _key_text(key: Any) -> str:
    # Values whose repr is their value; a tuple part by part; anything else by its class's
    # name: a repr of an object (a function, a class without a repr of its own, one whose repr
    # shows id()) may hold an address, which differs between processes.
    if type(key) is tuple:
        return "(" + "".join(_key_text(k) + ", " for k in key) + ")"
    if isinstance(key, _VALUE_KEYS):
        return repr(key)
    return f"<{type(key).__qualname__}>"


def _truncate(value: Any, length: int) -> str:
    text = str(value)
    return text[:length] + (text[length:] and "...")


def _pack(structure: Any, flat: Any, index: int, expand: bool) -> tuple[int, list[Any]]:
    packed: list[Any] = []
    for child in _children(structure, _kind(structure, expand), for_pack=True):
        if _kind(child, expand) == _LEAF:
            packed.append(flat[index])
            index += 1
        else:
            index, sub = _pack(child, flat, index, expand)
            packed.append(_sequence_like(child, sub))
    return index, packed


def pack_sequence_as(structure: Any, flat_sequence: Any, expand_composites: bool = False) -> Any:
    """Returns a given flattened sequence packed into a given structure.

    If ``structure`` is an atom, ``flat_sequence`` must be a single-element list; in this case
    the return value is ``flat_sequence[0]``. Dicts are filled in sorted-key order and returned
    as the same type (an ``OrderedDict`` keeps its key order, a ``defaultdict`` its
    ``default_factory``); namedtuples are rebuilt with their own class.

    Args:
      structure: an atom or a nested structure (numpy arrays and strings are atoms).
      flat_sequence: flat sequence to pack.
      expand_composites: if true, composites are packed from their components.

    Returns:
      ``flat_sequence`` packed into the recursive structure of ``structure``.

    Raises:
      ValueError: If ``flat_sequence`` and ``structure`` have different atom counts.
      TypeError: ``flat_sequence`` is not a sequence, or ``structure`` is or contains a dict
        with non-sortable keys.
    """
    expand = bool(expand_composites)
    if _kind(flat_sequence) == _LEAF:
        raise TypeError(
            f"Attempted to pack value:\n  {_truncate(flat_sequence, 100)}\ninto a structure, "
            f"but found incompatible type `{type(flat_sequence)}` instead."
        )
    if _kind(structure, expand) == _LEAF:
        if len(flat_sequence) != 1:
            raise ValueError(
                f"The target structure is of type `{type(structure)}`\n  "
                f"{_truncate(structure, 100)}\nHowever the input is a sequence "
                f"({type(flat_sequence)}) of length {len(flat_sequence)}.\n  "
                f"{_truncate(flat_sequence, 100)}\nnest cannot guarantee that it is safe to map "
                "one to the other."
            )
        return flat_sequence[0]
    try:
        final_index, packed = _pack(structure, flat_sequence, 0, expand)
        if final_index < len(flat_sequence):
            raise IndexError
    except IndexError:
        flat_structure = flatten(structure, expand)
        if len(flat_structure) != len(flat_sequence):
            raise ValueError(
                f"Could not pack sequence. Structure had {len(flat_structure)} atoms, but "
                f"flat_sequence had {len(flat_sequence)} items.  Structure: {structure}, "
                f"flat_sequence: {flat_sequence}."
            ) from None
        raise
    return _sequence_like(structure, packed)


class _DotString:
    """Stands for each atom in the "Entire ... structure" lines of a structure error."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "."


_DOT = _DotString()


def _describe(value: Any) -> str:
    # TF's PyObjectToString.
    return f"type={type(value).__name__} str={value}"


def _tp_name(cls: type) -> str:
    # What C's tp_name holds: the bare name for classes made in Python, "module.name" for
    # extension types outside builtins (collections.OrderedDict, numpy.ndarray).
    if cls.__flags__ & _HEAPTYPE or cls.__module__ == "builtins":
        return cls.__name__
    return f"{cls.__module__}.{cls.__name__}"


def _type_mismatch(nest1: Any, nest2: Any) -> tuple[str, bool]:
    # TF's message says "namedtuples" for any two sequence types; kept word for word.
    return (
        "The two namedtuples don't have the same sequence type. First structure "
        f"{_describe(nest1)} has type {_tp_name(type(nest1))}, while second structure "
        f"{_describe(nest2)} has type {_tp_name(type(nest2))}",
        True,
    )


def _structure_error(
    nest1: Any, nest2: Any, check_types: bool, expand: bool = False
) -> tuple[str, bool] | None:
    """Returns (message, is_type_error) for the first difference, or None (TF's C++ helper)."""
    kind1 = _kind(nest1, expand)
    kind2 = _kind(nest2, expand)
    if (kind1 == _LEAF) != (kind2 == _LEAF):
        seq, atom = (nest1, nest2) if kind2 == _LEAF else (nest2, nest1)
        return (
            f'Substructure "{_describe(seq)}" is a sequence, while substructure '
            f'"{_describe(atom)}" is not',
            False,
        )
    if kind1 == _LEAF:
        return None
    if check_types:
        type1, type2 = type(nest1), type(nest2)
        if kind1 == _NAMEDTUPLE and kind2 == _NAMEDTUPLE:
            # Two namedtuple classes with the same name and fields count as one type.
            if nest1._fields != nest2._fields or type1.__name__ != type2.__name__:
                return _type_mismatch(nest1, nest2)
        elif (
            type1 is not type2
            and not (isinstance(nest1, list) and isinstance(nest2, list))
            and not (kind1 == _MAP and kind2 == _MAP)
        ):
            return _type_mismatch(nest1, nest2)
        # Every Mapping (TF's collections.abc.Mapping), not only dicts.
        if kind1 == kind2 == _MAP and (len(nest1) != len(nest2) or nest1.keys() - nest2.keys()):
            return (
                "The two dictionaries don't have the same set of keys. First structure has keys "
                f"{_describe(list(nest1))}, while second structure has keys "
                f"{_describe(list(nest2))}",
                False,
            )
    if kind1 == _COMPOSITE and kind2 == _COMPOSITE:  # checked with check_types=False too
        (key1, spec1), (key2, spec2) = nest1._nest_type_spec(), nest2._nest_type_spec()
        if key1 != key2:
            text1, text2 = (f"type={s.partition('(')[0]} str={s}" for s in (spec1, spec2))
            return f"Incompatible CompositeTensor TypeSpecs: {text1} vs. {text2}", False
    children1 = list(_children(nest1, kind1))
    children2 = list(_children(nest2, kind2))
    kind_of = _KIND.get
    for child1, child2 in zip(children1, children2, strict=False):
        if kind_of(type(child1)) == _LEAF and kind_of(type(child2)) == _LEAF:
            continue  # the common case, without a call
        error = _structure_error(child1, child2, check_types, expand)
        if error is not None:
            return error
    if len(children1) != len(children2):
        return (
            "The two structures don't have the same number of elements. First structure: "
            f"{_describe(nest1)}. Second structure: {_describe(nest2)}",
            False,
        )
    return None


def assert_same_structure(
    nest1: Any, nest2: Any, check_types: bool = True, expand_composites: bool = False
) -> None:
    """Asserts that two structures are nested in the same way.

    Note the method does not check the types of atoms inside the structures.

    Args:
      nest1: an atom or a nested structure.
      nest2: an atom or a nested structure.
      check_types: if ``True`` (default) types of sub-structures are checked as well, and the
        keys of mappings. Namedtuples with identical name and fields, two list subtypes or two
        mappings count as the same type.
      expand_composites: if true, composites are compared by their ``TypeSpec`` and components.

    Raises:
      ValueError: the two structures are not nested in the same way.
      TypeError: with ``check_types``, two sub-structures differ in type.
    """
    error = _structure_error(nest1, nest2, bool(check_types), bool(expand_composites))
    if error is None:
        return
    message, is_type_error = error
    # As in TF, these two lines may themselves raise (a dict with unsortable keys).
    dots1 = str(_map_one(lambda _: _DOT, nest1))
    dots2 = str(_map_one(lambda _: _DOT, nest2))
    exc_type = TypeError if is_type_error else ValueError
    raise exc_type(
        "The two structures don't have the same nested structure.\n\n"
        f"First structure: {_describe(nest1)}\n\nSecond structure: {_describe(nest2)}\n\n"
        f"More specifically: {message}\n"
        f"Entire first structure:\n{dots1}\nEntire second structure:\n{dots2}"
    )


def _map_one(func: Callable[..., Any], structure: Any, expand: bool = False) -> Any:
    kind = _kind(structure, expand)
    if kind == _LEAF:
        return func(structure)
    kind_of = _KIND.get
    return _sequence_like(
        structure,
        [
            func(c) if kind_of(type(c)) == _LEAF else _map_one(func, c, expand)
            for c in _children(structure, kind)
        ],
    )


def _map_many(func: Callable[..., Any], structures: tuple[Any, ...], expand: bool) -> Any:
    first = structures[0]
    kind = _kind(first, expand)
    if kind == _LEAF:
        return func(*structures)
    columns = [_children(s, _kind(s, expand)) for s in structures]
    kind_of = _KIND.get
    return _sequence_like(
        first,
        [
            func(*row) if kind_of(type(row[0])) == _LEAF else _map_many(func, row, expand)
            for row in zip(*columns, strict=False)
        ],
    )


def map_structure(func: Callable[..., Any], *structure: Any, **kwargs: Any) -> Any:
    """Creates a new structure by applying ``func`` to each atom in ``structure``.

    Applies ``func(x[0], x[1], ...)`` where ``x[i]`` enumerates all atoms in ``structure[i]``,
    in the order of :func:`flatten`. All structures in ``structure`` must have the same arity,
    and the return value will contain results with the same structure layout.

    Args:
      func: A callable that accepts as many arguments as there are structures.
      *structure: atom or nested structure.
      **kwargs: ``check_types`` (default True: ``map_structure(func, [1], (1,))`` raises a
        ``TypeError``) and ``expand_composites`` (composites expanded as :func:`flatten` does).

    Returns:
      A new structure shaped as ``structure[0]`` (its types where ``check_types`` is False).

    Raises:
      TypeError: ``func`` is not callable, or the structures' types differ.
      ValueError: no structure, wrong keyword arguments, or the structures differ.
    """
    if not callable(func):
        raise TypeError(f"func must be callable, got: {func}")
    if not structure:
        raise ValueError("Must provide at least one structure")
    check_types = kwargs.pop("check_types", True)
    expand = bool(kwargs.pop("expand_composites", False))
    if kwargs:
        raise ValueError(
            "Only valid keyword arguments are `check_types` and `expand_composites`, not: `"
            + "`, `".join(kwargs)
            + "`"
        )
    if len(structure) == 1:
        return _map_one(func, structure[0], expand)
    for other in structure[1:]:
        assert_same_structure(structure[0], other, check_types, expand)
    return _map_many(func, structure, expand)
