"""Saved parsers: Lightning ``.ckpt`` files and published directories, both self-contained.

A checkpoint carries, beside the weights and hyperparameters, the encoder's
``config.json`` and tokenizer files (``encoder_files``), so a parser loads with no
network, no encoder package and no cache. :func:`write_directory` writes the form to copy
or publish::

    DIRECTORY/parser.json         hyperparameters, label and UPOS vocabularies
    DIRECTORY/model.safetensors   every weight (encoder included)
    DIRECTORY/encoder/            the encoder's config.json and tokenizer files

Training writes its ``.ckpt`` files through :class:`AtomicCheckpointIO`: a kill or a full
disk during a save leaves the previous file whole.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from safetensors.torch import load_file, load_model, save_model
from torch import Tensor, nn

ENCODER_FILES = "encoder_files"  # checkpoint key: {file name: bytes}
CONFIG, WEIGHTS, ENCODER = "parser.json", "model.safetensors", "encoder"
ZIP_MAGIC = b"PK\x03\x04"  # a .ckpt is a zip archive
PARTIAL = ".tmp"  # a checkpoint being written is NAME.tmp until it is complete


class CheckpointError(ValueError):
    """A file or directory that is not a saved parser; the message names it."""


@dataclass
class SavedParser:
    """What rebuilds a parser: constructor arguments, weights (a state dict, or the
    safetensors file of a directory) and the encoder's files (``None`` for checkpoints
    written before they were saved)."""

    hparams: dict
    weights: dict[str, Tensor] | Path
    encoder_files: dict[str, bytes] | None

    def state_dict(self) -> dict[str, Tensor]:
        """The weights, read from the safetensors file of a directory if need be."""
        return load_file(self.weights) if isinstance(self.weights, Path) else self.weights

    def load_weights_into(self, model: nn.Module, device: str | torch.device = "cpu") -> None:
        """Copy the weights into ``model`` (every key must match)."""
        if isinstance(self.weights, Path):
            load_model(model, self.weights, device=str(device))
        else:
            model.load_state_dict(self.weights)


def encoder_files(encoder: nn.Module) -> dict[str, bytes]:
    """``{name: content}`` of the files ``encoder.save_files`` writes (config, tokenizer)."""
    with tempfile.TemporaryDirectory() as tmp:
        encoder.save_files(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}


@contextmanager
def unpacked(files: dict[str, bytes] | None) -> Iterator[Path | None]:
    """A temporary directory holding ``files`` (``None`` in, ``None`` out)."""
    if files is None:
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            (Path(tmp) / Path(name).name).write_bytes(content)
        yield Path(tmp)


def check_checkpoint_path(path: str | Path) -> Path:
    """``path`` if it can be a saved parser (a file, or a directory with ``parser.json``);
    raises ``FileNotFoundError`` or :class:`CheckpointError` otherwise, before any loading."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "no such checkpoint", str(path))
    if path.is_dir():
        if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
            raise CheckpointError(f"{path}: not a saved parser directory (it needs {CONFIG} and {WEIGHTS})")
    elif not zipfile.is_zipfile(path):
        with open(path, "rb") as file:
            if file.read(len(ZIP_MAGIC)) == ZIP_MAGIC:
                raise CheckpointError(f"{path}: damaged checkpoint (its end is missing: truncated?)")
        raise CheckpointError(f"{path}: not a checkpoint (a .ckpt written by training or a directory written by Parser.save)")
    return path


@contextmanager
def damaged_reported(path: str | Path) -> Iterator[None]:
    """Any error but a missing file while ``path`` is read becomes one :class:`CheckpointError` line."""
    try:
        yield
    except FileNotFoundError:
        raise
    except Exception as error:  # torch.load reports a damaged zip archive in many ways
        first_line = next(iter(str(error).splitlines()), "")
        raise CheckpointError(f"{path}: damaged or unreadable checkpoint ({type(error).__name__}: {first_line})") from None


def check_readable(path: str | Path) -> None:
    """:func:`check_checkpoint_path`, and a ``.ckpt`` whose archive reads (tensors are
    mapped, not read); raises :class:`CheckpointError` naming it otherwise."""
    if not check_checkpoint_path(path).is_dir():
        with damaged_reported(path):
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def read(path: str | Path, map_location: str | torch.device = "cpu") -> SavedParser:
    """A ``.ckpt`` file or a directory of :func:`write_directory`; one of an earlier treeexp,
    whose hyperparameters were flat (before the network had its own settings), is refused."""
    path = check_checkpoint_path(path)
    if path.is_dir():
        try:
            hparams = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{path / CONFIG}: damaged saved parser ({error})") from None
        encoder = path / ENCODER
        files = {p.name: p.read_bytes() for p in sorted(encoder.iterdir()) if p.is_file()} if encoder.is_dir() else None
        saved = SavedParser(hparams, path / WEIGHTS, files)
    else:
        with damaged_reported(path):
            checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint or "hyper_parameters" not in checkpoint:
            raise CheckpointError(f"{path}: a PyTorch file, but not a parser checkpoint (no state_dict and hyper_parameters)")
        saved = SavedParser(dict(checkpoint["hyper_parameters"]), checkpoint["state_dict"], checkpoint.get(ENCODER_FILES))
    if "encoder_options" not in saved.hparams:
        raise CheckpointError(f"{path} was written by an earlier treeexp (before the network had its own settings): "
                              "parse with that version, or train again")
    return saved


def write_directory(directory: str | Path, hparams: dict, model: nn.Module, encoder: nn.Module) -> Path:
    """Write ``model`` (weights as safetensors), its ``hparams`` and the encoder's files."""
    directory = Path(directory)
    (directory / ENCODER).mkdir(parents=True, exist_ok=True)
    (directory / CONFIG).write_text(json.dumps(hparams, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_model(model, str(directory / WEIGHTS))
    encoder.save_files(directory / ENCODER)
    return directory


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``.ckpt`` files, each written whole or not at all.

    A save writes ``NAME.tmp`` beside the file, flushes it to the disk and renames it over
    ``NAME``: a process killed or a disk filled during the save leaves the previous file as
    it was (a full disk ends in ``OSError`` naming ``NAME``). Lightning's own save renames
    a temporary file of ``$TMPDIR``, which is a copy into ``NAME``, not a rename, where
    ``$TMPDIR`` is another file system. A file that cannot be read back is a
    :class:`CheckpointError` naming it. Remote paths (``s3://``...) go to Lightning's save,
    where an upload lands whole or not at all.
    """

    def save_checkpoint(self, checkpoint: dict, path: str | Path, storage_options: object | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + PARTIAL)
        try:
            with open(partial, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, path)
        except Exception as error:  # torch.save reports a failed write as the context of its own error
            failed = next((e for e in (error, error.__context__) if isinstance(e, OSError)), None)
            if failed is None:
                raise
            raise OSError(failed.errno, f"{failed.strerror}; the checkpoint was not written (any earlier one is "
                                        "unchanged)", str(path)) from error
        finally:
            partial.unlink(missing_ok=True)

    def load_checkpoint(self, path: str | Path, map_location: Callable | None = lambda storage, loc: storage,
                        weights_only: bool | None = None) -> dict:
        if "://" not in str(path):
            check_checkpoint_path(path)
        with damaged_reported(path):
            return super().load_checkpoint(path, map_location, weights_only)
