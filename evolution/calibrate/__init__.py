"""`evolve calibrate`: how well does a short training rank designs as a long one does?

A fixed panel (the space's generation-0 presets and random genomes of the space,
`evolution.calibrate.panel`) is trained at a ladder of step counts and at a longer target
(`evolution.calibrate.calibration`: a run of kind ``calibrate``, resumable); per rung,
`evolution.calibrate.stats` gives the rank correlation with the full fidelity and the
target over the whole panel, the top-k recall of a promotion at that rung (by its quality
and, below the full fidelity, by its held-out loss, as a search's first stage promotes) and
the quality distribution; `evolution.calibrate.table` prints them. Importing this package
loads nothing: the command line reads `evolution.calibrate.defaults` when it builds its
parser.
"""
