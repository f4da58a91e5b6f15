"""The `evolve` command line: `main.py` holds the command table and `main()`, one module per
command group (`run`, `inspect`, `genome`, `replay`, `scale`, `ablate`) parses and prints,
`output.py` the consoles and the JSON document they share. No module here imports torch at
module level: the parser is built by every command."""
