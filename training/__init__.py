"""Building the bundled demo models: data from public packages, training, evaluation."""
