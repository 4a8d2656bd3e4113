"""The parser: rooms by concept, the model and the commands at the top.

``data/`` (files -> batches), ``network/`` (batches -> scores), ``training/`` (terms,
teacher, callbacks, checkpoints, metrics), ``decoding/`` (scores -> trees), ``model.py``
(the LightningModule that joins them) and the commands run as ``python -m parser.NAME``:
``predict``, ``evaluate``, ``crossing_margin``, ``show``, ``plot``, ``adapt``, ``fetch``
(``cli.py`` and ``drawing.py`` serve them).
"""
