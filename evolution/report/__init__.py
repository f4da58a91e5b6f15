"""What the store says about runs and individuals, for people: `summary.py` (plain-data
views: run results, audits, look-ups), `ledger.py` (the run's training ledger per
generation), `blame.py` (who gave each region its form) and the HTML run report
(`html.py`, from `html_data.py`, `html_figures.py`, `html_lineage.py`)."""
