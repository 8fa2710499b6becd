"""Prefect flows: thin wrappers over curate stages."""
