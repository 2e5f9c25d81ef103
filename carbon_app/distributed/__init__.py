"""Jobs beyond one process: VCF batches and region scans spread over a Ray cluster."""
