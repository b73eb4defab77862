"""CLI command functions. Each module parses flags and calls one library function; lewisrag.cli registers them."""
