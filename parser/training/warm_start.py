"""Starting a parser from another one's network (``--model.init``): fine-tuning a multilingual
base on a new treebank. Every weight is copied by name; the rows of a parameter sized by a
vocabulary (labels, treebanks: ``Network.vocabulary_rows``) are matched by name, and a name
the saved parser lacks starts from its fallback's row (a label's universal part, ``obl`` for
``obl:tmod``; the learned vector of unseen treebanks), else from its fresh row. Features the
saved parser lacks start silent: word vectors through a projection at zero, character vectors
through zero columns of the weights that read them (``Network.character_inputs``)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from objectives.conventions import ConfigurationError

from parser.network import Network
from parser.network.network import VocabularyRows
from parser.training.checkpoint import SavedParser

PREFIX = "network."  # the network's weights in a parser's state dict
OPTIONAL = ("tagger.", "encoder.treebank_vectors.", "encoder.word_vectors.", "encoder.characters.")  # weights one network may have without the other


def start_from(network: Network, encoder: str, saved: SavedParser, path: str | Path,
               option: str = "--model.init") -> None:
    """Copy ``saved``'s network weights into ``network`` (of the transformer ``encoder``); a
    ConfigurationError names what does not fit (and ``option``, what gave ``path``): another
    encoder, weights only one of them has (other settings: the saved parser's ``config.yaml``
    has them), shapes that differ."""
    def mismatch(what: str) -> ConfigurationError:
        return ConfigurationError(f"{option} {path}: {what} (train with the settings it was trained with)")

    if saved.hparams.get("encoder") != encoder:
        raise mismatch(f"its encoder is {saved.hparams.get('encoder')!r}, this one's {encoder!r}")
    source = {key[len(PREFIX):]: value for key, value in saved.state_dict().items() if key.startswith(PREFIX)}
    target = network.state_dict()
    for ours, theirs, where in ((source, target, "only it has"), (target, source, "only this one has")):
        if only := [key for key in ours if key not in theirs and not key.startswith(OPTIONAL)]:
            raise mismatch(f"weights {where}: {', '.join(only[:4])}{' ...' if len(only) > 4 else ''}")
    rows = network.vocabulary_rows()
    widened = set() if any(key.startswith("encoder.characters.") for key in source) else set(network.character_inputs())
    weights = {}
    for key, value in target.items():
        if key not in source:
            weights[key] = value
        elif key in rows:
            weights[key] = _rows_by_name(value, source[key], saved.hparams.get(rows[key].hparam) or [], rows[key])
        elif key in widened and source[key].shape[:-1] == value.shape[:-1] and source[key].shape[-1] < value.shape[-1]:
            weights[key] = torch.cat([source[key].to(value.dtype), value.new_zeros(
                *value.shape[:-1], value.shape[-1] - source[key].shape[-1])], -1)  # the characters' columns: zero
        elif source[key].shape != value.shape:
            raise mismatch(f"{key} is {tuple(source[key].shape)} there, {tuple(value.shape)} here")
        else:
            weights[key] = source[key]
    network.load_state_dict(weights)


def _rows_by_name(fresh: Tensor, saved: Tensor, saved_names: list[str], rows: VocabularyRows) -> Tensor:
    """``fresh`` (a row per name of ``rows.names``, dimension 0) with each row taken from ``saved``
    (a row per name of ``saved_names``) by its name, else by its fallback's, else left fresh."""
    position = {name: i for i, name in enumerate(saved_names)}
    out = fresh.clone()
    for i, name in enumerate(rows.names):
        j = position.get(name, position.get(rows.fallback(name)))
        if j is not None:
            out[i] = saved[j].to(out.dtype)
    return out
