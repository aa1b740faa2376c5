"""Tools around the core: the CLI, the benchmark harness, the tree trace printer, the layer
search and teacher-forced scoring. Depends on the core, io and proof, never the other way."""
