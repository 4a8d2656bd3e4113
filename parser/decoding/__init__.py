"""Scores to trees: the decoding policy, the MST and Eisner decoders, and parses with tags and marginals."""
