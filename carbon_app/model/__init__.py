"""Loaded models: finding and loading checkpoints, the bundle the engine uses, the cached manager,
and the forward pass with its KV cache."""
