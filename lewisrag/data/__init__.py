"""Readers, writers, chunking and the built-in world."""
