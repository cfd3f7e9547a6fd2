"""Engines: the simulated vLLM (virtual-time and live) and the glue to real vLLM.

This package has no Django models; the console passes plain specs in (see ``specs``).
"""
