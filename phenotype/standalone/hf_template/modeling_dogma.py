"""An exported DOGMA phenotype as a transformers causal language model (remote code).

Written by `evolve export --format hf`; loaded with
`AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`. The network is DOGMA's
own code, flattened into the `dogma_*.py` modules beside this file (the export names each
below the imports); it needs torch, safetensors and transformers only.

- `forward(input_ids, labels=None)`: logits (B, T, V); `labels` gives transformers' shifted
  next-token cross-entropy (-100 ignored), plus the MoE balancing loss in training mode.
- `generate(...)`: decodes through the model's recurrent `step` state (KV caches, scan
  states), one token per forward. Greedy and sampling work; beam search and assisted
  decoding do not (the state cannot be reordered or cropped), nor does padding: DOGMA
  models have no attention mask, so every sequence of a batch has the same length.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_dogma import DogmaConfig
from .dogma_modules import build_config

# transformers renamed the output's and forward's cache field (`past_key_values` -> `cache`).
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class DogmaState:
    """The model's decoding state after `get_seq_length()` tokens: each layer's own (a KV
    cache, a scan state). Not a transformers `Cache`: it can be neither cropped nor reordered."""

    is_compileable = False
    is_croppable = False

    def __init__(self, state: dict[str, Any]):
        self.state = state

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.state["pos"])


class DogmaPreTrainedModel(PreTrainedModel):
    config_class = DogmaConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _is_stateful = True

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model brings its own state (`DogmaState`)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Every weight comes from the checkpoint or from the blocks' own init at build
        time; what transformers leaves unset is a block's non-persistent buffers (constant
        index tables), recomputed here from the block's config."""
        names = [n for n, _ in module.named_buffers(recurse=False) if n in module._non_persistent_buffers_set]
        build = getattr(getattr(module, "cfg", None), "build", None)
        if not names or build is None:
            return
        with torch.device("cpu"):
            fresh = build()
        for name in names:
            getattr(module, name).copy_(getattr(fresh, name))


class DogmaForCausalLM(DogmaPreTrainedModel, GenerationMixin):
    def __init__(self, config: DogmaConfig):
        super().__init__(config)
        if not config.dogma:
            raise ValueError("DogmaConfig.dogma is empty: this config names no DOGMA model")
        self.model = build_config(config.dogma["model"]).build()
        # A region that `shares` another's layers holds the same modules under a second name:
        # those names are tied to the first, so checkpoints store each weight once.
        first: dict[int, str] = {id(p): n for n, p in self.named_parameters()}
        self._tied_weights_keys = {
            f"^{re.escape(n)}$": f"^{re.escape(first[id(p)])}$"
            for n, p in self.named_parameters(remove_duplicate=False)
            if first[id(p)] != n
        }
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        cache: DogmaState | None = None,
        past_key_values: DogmaState | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple[Any, ...]:
        """input_ids (B, T) -> logits (B, T, V). With `use_cache` (what `generate` passes) the
        tokens go through the recurrent `step` from `cache` (a fresh state when None), and the
        output carries the advanced state."""
        if input_ids is None:
            raise ValueError("DOGMA models take input_ids (no inputs_embeds)")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("DOGMA models have no attention mask: padded batches are not supported")
        state = cache if cache is not None else past_key_values
        if use_cache or state is not None:
            logits, state = self._decode(input_ids, state)
        else:
            logits = self.model(input_ids)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, self.config.vocab_size, **kwargs)
            if self.training:
                loss = loss + self.model.aux_loss()
        if return_dict is False:
            return tuple(v for v in (loss, logits, state) if v is not None)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: state})

    def _decode(self, input_ids: torch.Tensor, state: DogmaState | None) -> tuple[torch.Tensor, DogmaState]:
        """Step each token of input_ids (B, n) through the state: logits (B, n, V)."""
        inner = state.state if state is not None else self.model.init_state(input_ids.shape[0])
        logits = []
        for t in range(input_ids.shape[1]):
            logits_t, inner = self.model.step(input_ids[:, t], inner)
            logits.append(logits_t)
        return torch.stack(logits, dim=1), DogmaState(inner)
