"""The network: a pretrained transformer's word vectors (characters, BiLSTM optional) and the
biaffine and tagging heads on them, sentences -> Scores."""

from .network import EncoderOptions, Heads, Network

__all__ = ["EncoderOptions", "Heads", "Network"]
