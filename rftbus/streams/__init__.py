"""Faust stream processors between the raw and curated experience topics."""
