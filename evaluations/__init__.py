"""Evaluations."""
