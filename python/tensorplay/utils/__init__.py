"""Utilities of tensorplay's serialization layer."""
