"""The configuration of an exported DOGMA phenotype, for `transformers` (remote code).

Written by `evolve export --format hf`. `dogma` holds the model's config tree (the block
configs the genome decoded to, as plain JSON, the standalone package's `config.json`); the
usual transformers fields are derived from it for tools that read them.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedConfig


class DogmaConfig(PreTrainedConfig):
    """`dogma`: {"format", "genome_id", "sequence", "modules", "model"} (the config tree)."""

    model_type = "dogma"

    dogma: dict[str, Any] | None = None
    vocab_size: int = 0
    hidden_size: int = 0
    max_position_embeddings: int = 0
    use_cache: bool = True
    # The model ties its head to the embedding itself (no separate head weight): nothing for
    # transformers to tie.
    tie_word_embeddings: bool = False
