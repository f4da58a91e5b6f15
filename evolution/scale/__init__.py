"""Size ladders and scaling laws of designs: `ladder.py` (a design at other widths and
depths), `train.py` (`evolve scale`: train a ladder, record it as a run, fit it),
`search_ladder.py` (`evolve run --ladder`: the search's elite up a ladder) and
`ladder_report.py` (what a search's ladder left in the store, as data and text)."""
