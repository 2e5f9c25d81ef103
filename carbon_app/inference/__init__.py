"""The engine: FNS marginals, sampling, generation (plain and speculative), scoring and scans.
Pure Python/PyTorch; nothing here imports Gradio."""
