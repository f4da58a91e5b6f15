"""The `evolve` command line: `main.py` holds the command table and `main()`, one module per
command group (`run`, `inspect`, `genome`, `replay`, `scale`, `ablate`) parses and prints,
`output.py` the consoles and the JSON they share, `progress.py` the live progress on stderr.
The parser is built by every command, so no module here loads torch or Ray when imported:
what the modules import at their top is torch-free (the options' registries and defaults,
`evolution.config`, `progress`, `genome`); a handler imports the torch side it runs (the
engine, the tasks, the summaries, `phenotype`), Ray's pool, plotly and the store's SQLAlchemy
when it runs. `tests/evolution/cli/test_light.py` pins this for the parser and `evolve genome
validate`."""
