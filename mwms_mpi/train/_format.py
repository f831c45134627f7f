"""The on-disk checkpoint format, written so that a process killed mid-save loses nothing.

A checkpoint with prefix ``P`` (``dir/ckpt-3``) is two files:

* ``P.data-<token>.npz``: an uncompressed zip of ``.npy`` members, one per saved value, named by
  its object path (``model/dense/kernel.npy``); ``<token>`` is random per write, so rewriting a
  prefix never touches the data file the current index names;
* ``P.index.json``: ``{"format", "version", "data_file", "data_bytes", "save_counter", "keys",
  "shapes", "dtypes", "crc32"}``; ``crc32`` is the zip's own CRC-32 of each member, which
  ``zipfile`` verifies again while reading, so a checksum costs nothing extra.

The index is the commit point: it is written only after the data file is complete and in place.
The directory's ``checkpoint`` state file (``_state.py``) is written after the index. Every file
is written to a temporary name in its directory, flushed, ``fsync``'d and moved into place with
``os.replace``, so each of them is either the old or the new complete file.

Checkpoints are shared between people, so no file named inside one may reach outside its
directory: an index's ``data_file`` must be ``<prefix name>.data-<hex>.npz`` and resolve (symlinks
followed) inside the prefix's directory, and so must the index itself, else restoring raises
``DataLossError``. Saving never deletes a file an index names; it removes what killed writes of
the same prefix left behind (orphaned data files, ``.*.tmp<pid>-<hex>`` files), found by name.

For the same reason every byte of the index and the data file is untrusted: whatever they hold
(JSON nested too deep for the parser, numbers too large for an integer, a zip member with a
compression method or ``.npy`` header this format never writes, a FIFO in place of a file),
restoring raises ``DataLossError`` naming the file, and never allocates more than the data file
holds (each member's extent, zip64 sizes included, is checked against the file's size, and its
``.npy`` header against the index and the member's size, first).

What is written must read back as it was: a dtype whose name or ``.npy`` header does not parse
back to itself (str, bytes, structured, object, extension dtypes) is refused before anything is
written (``check_savable_dtype``), and a prefix whose files would land outside the checkpoint
directory is refused too (``check_inside``).
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from mwms_mpi import errors
from mwms_mpi._arrays import native_dtype

FORMAT = "mwms_mpi.train.Checkpoint"
VERSION = 1
INDEX_SUFFIX = ".index.json"
_ZIP64_LIMIT = 1 << 31
_OP = "checkpoint"
# How atomic_write names its temporary file: "." + the file's name + this (as a glob).
TEMP_GLOB = ".tmp[0-9]*-*"


def index_path(prefix: str) -> str:
    """The index file of the checkpoint at ``prefix``."""
    return prefix + INDEX_SUFFIX


def data_files(prefix: str) -> list[str]:
    """Every data file (current or orphaned by a killed write) of the checkpoint at ``prefix``."""
    return glob.glob(glob.escape(prefix) + ".data-*.npz")


def is_inside(path: str, directory: str) -> bool:
    """Whether ``path`` resolves (symlinks and ``..`` followed) to a place below ``directory``."""
    root = os.path.realpath(directory)
    real = os.path.realpath(path)
    return real != root and os.path.commonpath([real, root]) == root


def _data_file_name_ok(prefix: str, name: object) -> bool:
    """Whether an index's ``data_file`` is a name this format writes for ``prefix``."""
    pattern = re.escape(os.path.basename(prefix)) + r"\.data-[0-9a-f]+\.npz"
    return isinstance(name, str) and re.fullmatch(pattern, name) is not None


def _data_and_temp_files(base: str) -> tuple[str, ...]:
    """Globs of the data files of the prefix named ``base`` and of its writes' temporary files."""
    name = glob.escape(base)
    return (
        f"{name}.data-*.npz",
        f".{name}.data-*.npz{TEMP_GLOB}",
        f".{name}{INDEX_SUFFIX}{TEMP_GLOB}",
    )


def sweep(directory: str, patterns: Iterable[str], keep: str | None = None) -> None:
    """Removes the files in ``directory`` matching the glob ``patterns`` (not ``keep``).

    Only names in ``directory`` itself are matched, and ``unlink`` removes a symlink, never
    what it points to, so nothing outside the directory is touched.
    """
    kept = None if keep is None else os.path.normpath(keep)
    for pattern in patterns:
        for name in glob.glob(os.path.join(glob.escape(directory), pattern)):
            if os.path.normpath(name) != kept:
                with contextlib.suppress(OSError):  # gone already, or a directory: leave it
                    os.unlink(name)


def _restorable(dtype: np.dtype) -> bool:
    """Whether a ``.npy`` member of ``dtype``, recorded by name in the index, reads back as it.

    The index records ``dtype.name``; str, bytes, structured, object and extension dtypes
    (``bfloat16`` without its registry, say) have names that do not parse back, or ``.npy``
    headers that read back as another dtype.
    """
    if dtype.kind in "OUSV" or dtype.hasobject:
        return False
    try:
        by_name = np.dtype(dtype.name)
        by_header = np.lib.format.descr_to_dtype(np.lib.format.dtype_to_descr(dtype))
    except (TypeError, ValueError):
        return False
    native = native_dtype(dtype)
    return bool(by_name == native and native_dtype(by_header) == native)


def check_savable_dtype(key: str, dtype: object) -> None:
    """Refuses (``ValueError``) to save a value whose dtype would not restore bit for bit.

    ``dtype`` is anything ``np.dtype`` takes; ``None`` (a duck-typed variable without one, or
    one numpy does not know) is checked later, on the value read.
    """
    try:
        resolved = None if dtype is None else np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        return
    if resolved is None or _restorable(resolved):
        return
    raise ValueError(
        f"Cannot checkpoint {key}: its dtype {resolved} ({resolved.str}) cannot be restored "
        "bit for bit from this format (str, bytes, structured, object and extension dtypes "
        "are refused). Nothing was written. Save numeric, bool, complex, datetime64 or "
        "timedelta64 values (encode text as integer codes, for example)."
    )


def check_inside(prefix: str, root: str) -> None:
    """Refuses (``ValueError``) a checkpoint prefix whose files would not be inside ``root``.

    The prefix's directory, normalised and with symlinks resolved, must be ``root`` or below
    it, and its last component a file name, so no file written for it (data, index, their
    temporary files, a worker's ``workertemp_<id>`` beside it) lands outside ``root``. TF
    itself writes wherever ``..`` leads; here nothing is written or deleted there.
    """
    base = os.path.basename(prefix)
    directory = os.path.dirname(prefix) or "."
    real_root = os.path.realpath(root)
    real = os.path.realpath(directory)
    inside = real == real_root or os.path.commonpath([real, real_root]) == real_root
    if not inside or base in ("", ".", ".."):
        raise ValueError(
            f"Refusing to write checkpoint {prefix!r}: it resolves to "
            f"{os.path.join(real, base)!r}, which is not inside the checkpoint directory "
            f"{root!r} ({real_root}). Name checkpoints inside their directory ('sub/ckpt' "
            "is fine); nothing was written."
        )


# -- atomic files -------------------------------------------------------------------------------


def atomic_write(path: str, write: Callable[[IO[bytes]], object]) -> None:
    """Writes ``path`` through ``write(file)`` so that it is either absent/old or complete.

    The bytes go to a temporary file in the same directory, which is flushed, ``fsync``'d and
    then renamed over ``path`` with ``os.replace``; on any error the temporary file is removed.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}-{_token()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Makes a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _token() -> str:
    return os.urandom(4).hex()


# -- data + index -------------------------------------------------------------------------------


def write_checkpoint(
    prefix: str,
    arrays: Iterable[tuple[str, np.ndarray]],
    counter: int,
    aliases: Mapping[str, str] | None = None,
) -> None:
    """Writes the data file, then the index, of the checkpoint at ``prefix``.

    Once the new index is in place, every other data file of ``prefix`` (the one the old index
    named, and orphans of killed writes) and every temporary file a killed write of ``prefix``
    left is removed: found by name in the prefix's directory, never taken from an index.

    Args:
      prefix: the checkpoint's path prefix; its directory must exist.
      arrays: ``(key, array)`` pairs in the order they are saved.
      counter: the ``save_counter`` recorded in the index.
      aliases: ``key -> first key`` for a value saved again because its object was reached
        under another name before (TF saves such an object once, as one node).
    """
    items = list(arrays)
    directory, base = os.path.split(prefix)
    data_name = f"{base}.data-{_token()}.npz"
    data_path = os.path.join(directory, data_name)
    crcs: dict[str, int] = {}

    def write_zip(file: IO[bytes]) -> None:
        with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            for key, array in items:
                large = array.nbytes >= _ZIP64_LIMIT
                with archive.open(key + ".npy", "w", force_zip64=large) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)
            crcs.update((info.filename[: -len(".npy")], info.CRC) for info in archive.infolist())

    atomic_write(data_path, write_zip)
    index = {
        "format": FORMAT,
        "version": VERSION,
        "data_file": data_name,
        "data_bytes": os.path.getsize(data_path),
        "save_counter": int(counter),
        "keys": [key for key, _ in items],
        "shapes": {key: list(array.shape) for key, array in items},
        "dtypes": {key: array.dtype.name for key, array in items},
        "crc32": crcs,
        "aliases": dict(aliases or {}),
    }
    text = json.dumps(index, indent=1).encode()
    atomic_write(index_path(prefix), lambda file: file.write(text))
    sweep(directory, _data_and_temp_files(base), keep=data_path)


@dataclass
class CheckpointData:
    """What a checkpoint holds: its arrays by key, in saved order, and its ``save_counter``."""

    path: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    save_counter: int = 0
    aliases: dict[str, str] = field(default_factory=dict)  # key -> the first key of its object


def _open_regular(path: str) -> IO[bytes]:
    """Opens ``path`` for reading, refusing (``ValueError``) anything but a regular file.

    ``O_NONBLOCK`` keeps a FIFO planted in its place from blocking the open; it changes nothing
    for a regular file.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{path} is a directory")
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# What parsing untrusted bytes raises besides ValueError (UnicodeDecodeError and JSONDecodeError
# are ValueErrors): JSON nested too deep (RecursionError is a RuntimeError), a number too large
# for int() (OverflowError), fields of the wrong type or missing.
_INDEX_ERRORS = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    RuntimeError,
    OverflowError,
)
# And what reading a zip of .npy members can raise: truncated or garbled archives and members,
# a compression method or encryption zipfile does not support (NotImplementedError,
# RuntimeError), a missing member (KeyError), a bad deflate stream (zlib.error).
_DATA_ERRORS = (
    OSError,
    EOFError,
    zipfile.BadZipFile,
    NotImplementedError,
    zlib.error,
    *_INDEX_ERRORS,
)


def _npy_header(member: IO[bytes], key: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype a ``.npy`` member's header declares (its data is not read)."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    else:
        raise ValueError(f"{key!r} is in .npy format version {version}, which is never written")
    return tuple(shape), dtype


def _read_member(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    key: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    data_bytes: int,
) -> np.ndarray:
    """Reads ``key``'s member ``info``, checked against the index's ``shape`` and ``dtype``.

    The member must be stored as this format writes it (uncompressed, not encrypted), lie
    within the ``data_bytes`` of the data file (zip64 sizes are 8-byte fields anyone can
    forge), and its ``.npy`` header must match the index and fit in the member before any
    array is allocated, so crafted sizes cannot make restoring allocate more than the file
    holds.
    """
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        raise ValueError(
            f"{key!r} is stored with compression method {info.compress_type} (flags "
            f"{info.flag_bits:#x}); this format writes uncompressed, unencrypted members"
        )
    if info.file_size != info.compress_size:
        raise ValueError(f"{key!r} is stored uncompressed but its sizes differ")
    if info.header_offset + info.compress_size > data_bytes:
        raise ValueError(
            f"{key!r} claims {info.compress_size} bytes at offset {info.header_offset}, past "
            f"the end of the {data_bytes}-byte data file"
        )
    with archive.open(info) as member:
        declared = _npy_header(member, key)
    if declared != (shape, dtype):
        raise ValueError(
            f"{key!r} is {declared[1]}{list(declared[0])}, the index says {dtype}{list(shape)}"
        )
    if math.prod(shape) * dtype.itemsize > info.file_size:
        raise ValueError(f"{key!r} declares more data than its {info.file_size} bytes")
    with archive.open(info) as member:
        array = np.lib.format.read_array(member, allow_pickle=False)
        if member.read():
            raise ValueError(f"trailing bytes after {key!r}")
    return array


def read_checkpoint(prefix: str) -> CheckpointData:
    """Reads and verifies the checkpoint at ``prefix``.

    Raises:
      NotFoundError: if there is no index file for ``prefix`` and no ``prefix``.
      DataLossError: if the index or the data file is incomplete, corrupt or missing, or
        ``prefix`` has no index but exists (TF's error for a file that is no table).
    """
    path = index_path(prefix)
    directory = os.path.dirname(prefix) or "."
    if os.path.lexists(path) and not is_inside(path, directory):
        raise _data_loss(prefix, f"its index {path} resolves to a file outside {directory}")
    try:
        with _open_regular(path) as file:
            raw = file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        if os.path.exists(prefix):
            raise _not_a_table(prefix) from exc
        raise errors.NotFoundError(
            None,
            _OP,
            f"Failed to find any matching files for {prefix} (no {path}). Please double-check "
            "that the path is correct. You may be missing the checkpoint suffix (e.g. the '-1' "
            "in 'path/to/ckpt-1').",
        ) from exc
    except (OSError, ValueError) as exc:
        raise _data_loss(prefix, f"its index {path} cannot be read ({exc})") from exc
    try:
        index = json.loads(raw)
        if not isinstance(index, dict):
            raise ValueError(f"a JSON {type(index).__name__}, not an object")
        if index.get("format") != FORMAT or index.get("version") != VERSION:
            raise ValueError(f"unknown format {index.get('format')!r} v{index.get('version')!r}")
        keys = [str(key) for key in index["keys"]]
        data_name = index["data_file"]
        data_bytes = int(index["data_bytes"])
        counter = int(index["save_counter"])
        shapes = {key: tuple(int(n) for n in index["shapes"][key]) for key in keys}
        dtypes = {key: np.dtype(index["dtypes"][key]) for key in keys}
        crcs = {key: int(index["crc32"][key]) for key in keys}
        aliases = {str(k): str(v) for k, v in index.get("aliases", {}).items()}
        if not set(aliases) | set(aliases.values()) <= set(keys):
            raise ValueError("an alias of a key it does not hold")
    except _INDEX_ERRORS as exc:
        raise _data_loss(prefix, f"the index {path} is incomplete or corrupt ({exc})") from exc
    data_path = os.path.join(os.path.dirname(prefix), str(data_name))
    if not _data_file_name_ok(prefix, data_name):
        raise _data_loss(
            prefix,
            f"the index {path} names the data file {data_name!r}, which is not a data file of "
            f"this checkpoint (expected {os.path.basename(prefix)}.data-<hex>.npz in {directory})",
        )
    if os.path.lexists(data_path) and not is_inside(data_path, directory):
        raise _data_loss(
            prefix, f"its data file {data_path} resolves to a file outside {directory}"
        )
    try:
        data = _open_regular(data_path)
    except (OSError, ValueError) as exc:
        raise _data_loss(
            prefix, f"its data file {data_path} is missing or not a regular file ({exc})"
        ) from exc
    result = CheckpointData(prefix, save_counter=counter, aliases=aliases)
    with data:
        size = os.fstat(data.fileno()).st_size
        if size != data_bytes:
            raise _data_loss(
                prefix, f"its data file {data_path} has {size} bytes, the index says {data_bytes}"
            )
        try:
            with zipfile.ZipFile(data) as archive:
                for key in keys:
                    info = archive.getinfo(key + ".npy")
                    if crcs[key] != info.CRC:
                        raise ValueError(
                            f"CRC-32 of {key!r} is {info.CRC}, the index says {crcs[key]}"
                        )
                    result.arrays[key] = _read_member(
                        archive, info, key, shapes[key], dtypes[key], size
                    )
        except _DATA_ERRORS as exc:
            raise _data_loss(prefix, f"its data file {data_path} is corrupt ({exc})") from exc
    return result


def _not_a_table(prefix: str) -> errors.DataLossError:
    """TF's error for a prefix with no index that exists (a directory, the data file, any other
    file): TF then opens the prefix itself as a V1 table. Only its size is looked at (an
    sstable's footer is 48 bytes)."""
    if os.path.isdir(prefix):
        why = f"FAILED_PRECONDITION: {prefix}; Is a directory"
    elif os.path.getsize(prefix) < 48:
        why = "DATA_LOSS: file is too short to be an sstable"
    else:
        why = "DATA_LOSS: not an sstable (bad magic number)"
    return errors.DataLossError(
        None,
        _OP,
        f"Unable to open table file {prefix}: {why}: perhaps your file is in a different file "
        "format and you need to use a different restore operator?",
    )


def _data_loss(prefix: str, why: str) -> errors.DataLossError:
    return errors.DataLossError(None, _OP, f"Checkpoint {prefix} cannot be restored: {why}.")


def remove_checkpoint(prefix: str, directory: str) -> None:
    """Deletes the checkpoint at ``prefix`` (index first, so no half checkpoint looks whole).

    Raises:
      PermissionDeniedError: if ``prefix`` is not inside ``directory`` (nothing is deleted).
    """
    if not is_inside(prefix, directory):
        raise errors.PermissionDeniedError(
            None, _OP, f"Refusing to delete checkpoint {prefix}: it is not inside {directory}."
        )
    with contextlib.suppress(FileNotFoundError):
        os.unlink(index_path(prefix))
    sweep(os.path.dirname(prefix), _data_and_temp_files(os.path.basename(prefix)))
