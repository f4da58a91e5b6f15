"""A phenotype as a standalone package: `writer.py` copies a decoded model's block modules
and weights into `dogma_model/`, trainable with torch alone; `template/` is the package's
own code, copied as it is."""
