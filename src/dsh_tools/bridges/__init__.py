"""Bridges between the registry and the wire formats of model providers and protocols."""
