"""Sentences in, batches out: CoNLL-U and text files, vocabularies, length buckets, the
unlabeled stream and the LightningDataModule."""
