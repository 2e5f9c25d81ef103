"""Developer tools: the benchmark, the soak test and Carbon-shaped models with random weights."""
