"""The parser: rooms by concept, the model and the commands at the top.

``data/`` (files -> batches), ``network/`` (batches -> scores), ``training/`` (terms,
teacher, callbacks, checkpoints, metrics), ``decoding/`` (scores -> trees), ``model.py``
(the LightningModule that joins them) and the commands (``treeexp NAME``, :mod:`parser.main`):
``predict``, ``evaluate``, ``crossing_margin``, ``show``, ``plot``, ``adapt``, ``fetch``,
``statistics``, ``nearness``, ``pipeline`` (``runs.py``: one run), ``data/partial.py`` and
``data/tokenizer.py`` (``cli.py`` and ``drawing.py`` serve them).
"""
