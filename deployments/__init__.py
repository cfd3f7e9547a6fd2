"""Deployments."""
