"""Catalog: GPU types, models, model versions and their memory estimates."""
