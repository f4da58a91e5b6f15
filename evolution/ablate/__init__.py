"""Ablation of one individual (`evolve ablate`): `changes.py` (each module removed or
replaced), `ablation.py` (the plan, its store and its training) and `stats.py` (each
change's effect with an interval, paired by seed)."""
