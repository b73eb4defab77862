"""`python -m lewisrag`: the same CLI as the `lewisrag` command."""

from lewisrag.cli import main

if __name__ == "__main__":
    main()
