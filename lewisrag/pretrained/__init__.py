"""Checkpoints shipped with the package, each built by `lewisrag pretrain` (see its recipe.json and docs/recipe.md)."""
