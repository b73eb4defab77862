"""CLI command functions. Each module parses flags and calls one library function; lewisrag.cli registers them.

The command modules import the library inside each command function, not at the top: `lewisrag`
imports every command module to build its help, and `lewisrag --help` or `lewisrag gate` should not
load torch, transformers and FAISS (about 2 s). These are the only deliberate lazy imports of
lewisrag's own modules.
"""
