"""What the dataset cards (``curate.select.export``, ``curate.solutions.export``) and the model cards
(``training.card``) share: how a value is shown (``fmt``: never a Python repr such as ``None`` or a 16-digit float)
and the Hub's size category of a dataset. The cards themselves are ``huggingface_hub`` ``DatasetCard`` /
``ModelCard`` objects with their card data (licence, language, datasets, ...) as front matter."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def fmt(value: Any, nested: bool = False) -> str:
    """A value as a card shows it, never a Python repr: None as ``n/a``, floats to 4 significant digits, integers
    with thousands separators, booleans as yes / no, mappings as ``key: value`` pairs, lists joined by commas.

    >>> fmt(0.30000000000000004), fmt(None), fmt(7466), fmt({"too_long": 3, "lr": 1e-05}), fmt([])
    ('0.3', 'n/a', '7,466', 'too_long: 3, lr: 1e-05', 'none')
    """
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, Mapping | list | tuple):
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        parts = [f"{k}: {fmt(v, True)}" if isinstance(value, Mapping) else fmt(v, True) for k, v in items]
        text = ", ".join(parts) or "none"
        return f"({text})" if nested and parts else text
    return str(value)


def size_category(n: int) -> str:
    """The Hub's ``size_categories`` value of a dataset of ``n`` rows.

    >>> size_category(999), size_category(7466)
    ('n<1K', '1K<n<10K')
    """
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"
