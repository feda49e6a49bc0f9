"""The explorer's widgets, one per file."""
