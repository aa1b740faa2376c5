"""Proof tooling: the exact-law oracle engine and the checker for other implementations.
Depends on the core, never the other way."""
