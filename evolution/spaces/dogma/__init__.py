"""The DOGMA space: `space.py` (`DogmaSpace`), `operators.py` (variation), `repair.py`
(a varied document back to validity), `seeds.py` (the initial population) and
`features.py` (the surrogate's inputs)."""
