"""Shared test helpers: serial numpy references and rank-deterministic data."""
