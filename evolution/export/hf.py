"""`evolve export --format hf`: a trained phenotype as a Hugging Face model directory.

    config.json, configuration_dogma.py, modeling_dogma.py, dogma_*.py, model.safetensors
                          what `phenotype.standalone.hf.write_hf` writes: transformers loads it
                          with `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`
    generation_config.json  greedy decoding with the model's recurrent state
    genome.yaml, example.safetensors, README.md   as in the standalone export; the card holds
                          the same provenance, with transformers' metadata and loading

The directory needs torch, safetensors and transformers (the `hf` extra). Before it is put in
place, transformers loads it in this process and its logits must equal the phenotype's on the
example (as the standalone package is checked).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch

from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import DogmaModel
from dogma_evolve.phenotype.standalone.hf import write_hf
from dogma_evolve.phenotype.standalone.writer import logits_match, run_both_paths

GENERATION_CONFIG = {"do_sample": False, "use_cache": True}


def require_transformers() -> None:
    """UsageError unless transformers can be imported (the `hf` extra)."""
    if importlib.util.find_spec("transformers") is None:
        raise UsageError(
            "--format hf needs transformers, which is not installed: install the project's "
            "`hf` extra (pip install -e '.[hf]')"
        )


def check_hf(directory: Path, ids: torch.Tensor, expected: torch.Tensor) -> float:
    """Load the directory with transformers (remote code) and run `ids` through it, with its
    kernels' fast paths and with their references; StandaloneError unless both give
    `expected` (up to the kernels' float rounding, as `check_package`). Returns the largest
    absolute difference."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(directory), trust_remote_code=True)
        package = type(model).__module__.rpartition(".")[0]  # transformers' copy of the directory

        def logits(ids: torch.Tensor) -> torch.Tensor:
            return model(ids).logits

        got = run_both_paths(logits, ids, lambda: sys.modules.get(f"{package}.dogma_kernels__dispatch"))
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    return logits_match(directory, got, expected)


def write_hf_export(
    model: DogmaModel,
    genome: Genome,
    tmp: Path,
    example: torch.Tensor,
    expected: torch.Tensor,
    provenance: str,
) -> dict[str, Any]:
    """The Hugging Face files in tmp (beside genome.yaml and example.safetensors), checked."""
    info = write_hf(model, genome, tmp)
    (tmp / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=1) + "\n")
    check_hf(tmp, example, expected)
    (tmp / "README.md").write_text(_front_matter() + provenance + _hf_loading(genome))
    return {"package_kinds": info["kinds"], "modules": info["modules"], "tied_weights": info["tied"]}


def _front_matter() -> str:
    """The card's metadata block, read by the Hub and `huggingface_hub.ModelCard`."""
    return """---
library_name: transformers
pipeline_tag: text-generation
tags:
- dogma-evolve
- custom_code
---

"""


def _hf_loading(genome: Genome) -> str:
    vocab = genome.structural["vocab"]
    return f"""
## Loading (transformers, remote code)

The directory is a transformers model whose code sits beside its weights
(`modeling_dogma.py`, `configuration_dogma.py`, DOGMA's block code as `dogma_*.py`): it
needs torch, safetensors and transformers, nothing of DOGMA evolve.

```python
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(".", trust_remote_code=True)
example = load_file("example.safetensors")
logits = model(example["input"]).logits            # (B, T) int64 -> (B, T, {vocab})
assert torch.allclose(logits, example["output"], atol=1e-4)
out = model.generate(example["input"][:, :8], max_new_tokens=8, do_sample=False)
loss = model(example["input"], labels=example["input"]).loss   # shifted next-token CE
```

Token ids are the task's own (vocabulary {vocab}); there is no tokenizer. `generate`
decodes one token per step through the model's recurrent state (its KV caches and scan
states): greedy or sampled, without padding (DOGMA models take no attention mask), beam
search or assisted decoding. In training mode the loss adds the MoE balancing loss, if any.
`model.train()` and any optimizer (or `Trainer`) fine-tune it; `save_pretrained` writes the
code along with the weights.
"""
