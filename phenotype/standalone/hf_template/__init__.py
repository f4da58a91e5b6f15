"""The Hugging Face directory's own code, copied as it is by `phenotype.standalone.hf`:
`configuration_dogma.py` (the `PreTrainedConfig`) and `modeling_dogma.py` (the
`PreTrainedModel` with `GenerationMixin`). They import the model's flattened modules
relatively (`dogma_*.py`, written beside them), so they only run inside an exported
directory; transformers loads them with `trust_remote_code=True`."""
