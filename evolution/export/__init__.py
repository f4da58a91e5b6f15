"""Export: one stored individual out of the search, as a model directory that loads without
DOGMA (`evolve export`, `Search.export`).

    export_individual(store, record, out_dir, fmt="standalone"|"hf")   the directory, checked
                                                to reproduce the phenotype's logits first

Modules: `individual` (`export_individual`: the weights, the example, the model card and the
standalone format), `hf` (the Hugging Face format; needs the `hf` extra). The model code the
directories carry is written by `phenotype.standalone` (`writer`, `hf`).
"""

from dogma_evolve.evolution.export.individual import FORMATS, export_individual, own_evaluation, seeds_line

__all__ = ["FORMATS", "export_individual", "own_evaluation", "seeds_line"]
