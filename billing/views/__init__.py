"""Console pages of the billing app, by concept."""
