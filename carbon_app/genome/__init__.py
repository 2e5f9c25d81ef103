"""Genome coordinates: reference FASTA files, variants at coordinates, VCF batches. The engine below never
sees a chromosome name: this layer turns coordinates into sequence windows and results back into coordinates."""
