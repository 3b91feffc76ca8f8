"""Portable bundles: reading and checking one, planning an import, export and import."""
