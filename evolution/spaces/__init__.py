"""Search spaces: what the engine searches over, behind one contract.

- `contract.py`: the `SearchSpace` and `Genotype` protocols, `Child` and `Discard` (a
  space's variation either makes a valid child or refuses with `Discard`);
- `registry.py`: `SPACES[name]`, the class for a run's `space` setting;
- `dogma/`: DOGMA genomes (operators, repair, seeds, features, the space);
- `nb201.py`: NAS-Bench-201 cells, evaluated by table look-up.

Nothing is imported here, so that a module can import the contract without the spaces.
"""
