"""Catalogs: load a table's current metadata location and swap it atomically."""
