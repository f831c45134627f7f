"""The on-disk checkpoint format, written so that a process killed mid-save loses nothing.

A checkpoint with prefix ``P`` (``dir/ckpt-3``) is two files:

* ``P.data-<token>.npz``: an uncompressed zip of ``.npy`` members, one per saved value, named by
  its object path (``model/dense/kernel.npy``); ``<token>`` is random per write, so rewriting a
  prefix never touches the data file the current index names;
* ``P.index.json``: ``{"format", "version", "data_file", "data_bytes", "save_counter", "keys",
  "shapes", "dtypes", "crc32"}``; ``crc32`` is the zip's own CRC-32 of each member, which
  ``zipfile`` verifies again while reading, so a checksum costs nothing extra.

The index is the commit point: it is written only after the data file is complete and in place.
The directory's ``checkpoint`` state file (TF's text format, below) is written after the index.
Every file is written to a temporary name in its directory, flushed, ``fsync``'d and moved into
place with ``os.replace``, so each of them is either the old or the new complete file.

The ``checkpoint`` state file uses TF's ``CheckpointState`` text format, so TF tools read it::

    model_checkpoint_path: "ckpt-4"
    all_model_checkpoint_paths: "ckpt-3"
    all_model_checkpoint_paths: "ckpt-4"
    all_model_checkpoint_timestamps: 1795374864.9890506
    all_model_checkpoint_timestamps: 1795374865.000747
    last_preserved_timestamp: 1795374863.9205492

Paths inside the directory are stored relative to it, as TF's ``save_relative_paths=True``.
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import json
import os
import re
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from mwms_mpi import errors

FORMAT = "mwms_mpi.train.Checkpoint"
VERSION = 1
INDEX_SUFFIX = ".index.json"
STATE_FILENAME = "checkpoint"
_ZIP64_LIMIT = 1 << 31
_OP = "checkpoint"


def index_path(prefix: str) -> str:
    """The index file of the checkpoint at ``prefix``."""
    return prefix + INDEX_SUFFIX


def data_files(prefix: str) -> list[str]:
    """Every data file (current or orphaned by a killed write) of the checkpoint at ``prefix``."""
    return glob.glob(glob.escape(prefix) + ".data-*.npz")


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


def write_checkpoint(prefix: str, arrays: Iterable[tuple[str, np.ndarray]], counter: int) -> None:
    """Writes the data file, then the index, of the checkpoint at ``prefix``.

    Args:
      prefix: the checkpoint's path prefix; its directory must exist.
      arrays: ``(key, array)`` pairs in the order they are saved.
      counter: the ``save_counter`` recorded in the index.
    """
    items = list(arrays)
    old_data = _current_data_file(prefix)
    data_name = f"{os.path.basename(prefix)}.data-{_token()}.npz"
    data_path = os.path.join(os.path.dirname(prefix), data_name)
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
    }
    text = json.dumps(index, indent=1).encode()
    atomic_write(index_path(prefix), lambda file: file.write(text))
    if old_data is not None and old_data != data_path:
        with contextlib.suppress(OSError):
            os.unlink(old_data)


def _current_data_file(prefix: str) -> str | None:
    """The data file the current index of ``prefix`` names, or ``None``."""
    try:
        with open(index_path(prefix), "rb") as file:
            name = json.loads(file.read())["data_file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return os.path.join(os.path.dirname(prefix), str(name))


@dataclass
class CheckpointData:
    """What a checkpoint holds: its arrays by key, in saved order, and its ``save_counter``."""

    path: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    save_counter: int = 0


def read_checkpoint(prefix: str) -> CheckpointData:
    """Reads and verifies the checkpoint at ``prefix``.

    Raises:
      NotFoundError: if there is no index file for ``prefix``.
      DataLossError: if the index or the data file is incomplete, corrupt or missing.
    """
    path = index_path(prefix)
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise errors.NotFoundError(
            None,
            _OP,
            f"Failed to find any matching files for {prefix} (no {path}). Please double-check "
            "that the path is correct. You may be missing the checkpoint suffix (e.g. the '-1' "
            "in 'path/to/ckpt-1').",
        ) from exc
    try:
        index = json.loads(raw)
        if index.get("format") != FORMAT or index.get("version") != VERSION:
            raise ValueError(f"unknown format {index.get('format')!r} v{index.get('version')!r}")
        keys = [str(key) for key in index["keys"]]
        data_path = os.path.join(os.path.dirname(prefix), str(index["data_file"]))
        data_bytes = int(index["data_bytes"])
        counter = int(index["save_counter"])
        shapes = {key: tuple(index["shapes"][key]) for key in keys}
        dtypes = {key: np.dtype(index["dtypes"][key]) for key in keys}
        crcs = {key: int(index["crc32"][key]) for key in keys}
    except (ValueError, KeyError, TypeError) as exc:
        raise _data_loss(prefix, f"the index {path} is incomplete or corrupt ({exc})") from exc
    try:
        size = os.path.getsize(data_path)
    except OSError as exc:
        raise _data_loss(prefix, f"its data file {data_path} is missing ({exc})") from exc
    if size != data_bytes:
        raise _data_loss(
            prefix, f"its data file {data_path} has {size} bytes, the index says {data_bytes}"
        )
    result = CheckpointData(prefix, save_counter=counter)
    try:
        with zipfile.ZipFile(data_path) as archive:
            for key in keys:
                info = archive.getinfo(key + ".npy")
                if crcs[key] != info.CRC:
                    raise ValueError(f"CRC-32 of {key!r} is {info.CRC}, the index says {crcs[key]}")
                with archive.open(info) as member:
                    array = np.lib.format.read_array(member, allow_pickle=False)
                    if member.read():
                        raise ValueError(f"trailing bytes after {key!r}")
                if array.shape != shapes[key] or array.dtype != dtypes[key]:
                    raise ValueError(
                        f"{key!r} is {array.dtype}{list(array.shape)}, the index says "
                        f"{dtypes[key]}{list(shapes[key])}"
                    )
                result.arrays[key] = array
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise _data_loss(prefix, f"its data file {data_path} is corrupt ({exc})") from exc
    return result


def _data_loss(prefix: str, why: str) -> errors.DataLossError:
    return errors.DataLossError(None, _OP, f"Checkpoint {prefix} cannot be restored: {why}.")


def remove_checkpoint(prefix: str) -> None:
    """Deletes the checkpoint at ``prefix``: the index first, so no half checkpoint looks whole."""
    files = [index_path(prefix), *data_files(prefix)]
    for name in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


# -- the `checkpoint` state file ----------------------------------------------------------------


@dataclass
class CheckpointState:
    """TF's ``CheckpointState`` proto: the latest checkpoint and the ones still kept."""

    model_checkpoint_path: str = ""
    all_model_checkpoint_paths: list[str] = field(default_factory=list)
    all_model_checkpoint_timestamps: list[float] = field(default_factory=list)
    last_preserved_timestamp: float | None = None


def state_path(directory: str, latest_filename: str | None = None) -> str:
    """The state file of ``directory`` (``checkpoint`` unless ``latest_filename`` is given)."""
    return os.path.join(directory, latest_filename or STATE_FILENAME)


def _quote(text: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _relative(path: str, directory: str) -> str:
    if os.path.dirname(path) == directory or (
        os.path.isabs(path) and os.path.dirname(path) == os.path.abspath(directory)
    ):
        return os.path.basename(path)
    return path


def write_state(directory: str, state: CheckpointState, latest_filename: str | None = None) -> None:
    """Atomically writes ``state`` (paths made relative to ``directory`` where inside it)."""
    lines = [f"model_checkpoint_path: {_quote(_relative(state.model_checkpoint_path, directory))}"]
    lines += [
        f"all_model_checkpoint_paths: {_quote(_relative(path, directory))}"
        for path in state.all_model_checkpoint_paths
    ]
    lines += [
        f"all_model_checkpoint_timestamps: {t!r}" for t in state.all_model_checkpoint_timestamps
    ]
    if state.last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {state.last_preserved_timestamp!r}")
    text = ("\n".join(lines) + "\n").encode("ascii")
    atomic_write(state_path(directory, latest_filename), lambda file: file.write(text))


_LINE = re.compile(r'^\s*(\w+)\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))\s*$')


def read_state(directory: str, latest_filename: str | None = None) -> CheckpointState | None:
    """The state of ``directory`` with paths joined to it, or ``None`` if there is none.

    Raises:
      DataLossError: if the state file exists but cannot be parsed.
    """
    path = state_path(directory, latest_filename)
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    state = CheckpointState()
    fields: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            raise errors.DataLossError(
                None, _OP, f"{path}:{number}: not a CheckpointState text line: {line!r}"
            )
        name, quoted, bare = match.groups()
        if quoted is not None:
            raw = codecs.escape_decode(quoted.encode("utf-8"))[0]
            value: Any = os.path.join(directory, bytes(raw).decode("utf-8"))
        else:
            value = float(bare)
        fields.setdefault(name, []).append(value)
    state.model_checkpoint_path = (fields.get("model_checkpoint_path") or [""])[-1]
    state.all_model_checkpoint_paths = list(fields.get("all_model_checkpoint_paths", []))
    state.all_model_checkpoint_timestamps = list(fields.get("all_model_checkpoint_timestamps", []))
    preserved = fields.get("last_preserved_timestamp")
    state.last_preserved_timestamp = preserved[-1] if preserved else None
    return state
