"""The Dagster layer: partitions, resources, assets, checks and jobs over the plain core."""
