"""Saved parsers: Lightning ``.ckpt`` files and published directories, both self-contained.

A checkpoint carries, beside the weights and hyperparameters, the encoder's
``config.json`` and tokenizer files (``encoder_files``), so a parser loads with no
network, no encoder package and no cache. :func:`write_directory` writes the form to copy
or publish::

    DIRECTORY/parser.json         hyperparameters, label and UPOS vocabularies
    DIRECTORY/model.safetensors   every weight (encoder included)
    DIRECTORY/encoder/            the encoder's config.json and tokenizer files
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_model
from torch import Tensor, nn

ENCODER_FILES = "encoder_files"  # checkpoint key: {file name: bytes}
CONFIG, WEIGHTS, ENCODER = "parser.json", "model.safetensors", "encoder"


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
        raise CheckpointError(f"{path}: not a checkpoint (a .ckpt written by training or a directory written by Parser.save)")
    return path


def read(path: str | Path, map_location: str | torch.device = "cpu") -> SavedParser:
    """A ``.ckpt`` file or a directory of :func:`write_directory`."""
    path = check_checkpoint_path(path)
    if path.is_dir():
        try:
            hparams = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{path / CONFIG}: damaged saved parser ({error})") from None
        encoder = path / ENCODER
        files = {p.name: p.read_bytes() for p in sorted(encoder.iterdir()) if p.is_file()} if encoder.is_dir() else None
        return SavedParser(hparams, path / WEIGHTS, files)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch.load reports a damaged zip archive in many ways
        raise CheckpointError(f"{path}: damaged or unreadable checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint or "hyper_parameters" not in checkpoint:
        raise CheckpointError(f"{path}: a PyTorch file, but not a parser checkpoint (no state_dict and hyper_parameters)")
    return SavedParser(dict(checkpoint["hyper_parameters"]), checkpoint["state_dict"], checkpoint.get(ENCODER_FILES))


def write_directory(directory: str | Path, hparams: dict, model: nn.Module, encoder: nn.Module) -> Path:
    """Write ``model`` (weights as safetensors), its ``hparams`` and the encoder's files."""
    directory = Path(directory)
    (directory / ENCODER).mkdir(parents=True, exist_ok=True)
    (directory / CONFIG).write_text(json.dumps(hparams, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    save_model(model, str(directory / WEIGHTS))
    encoder.save_files(directory / ENCODER)
    return directory
