"""The benchmark suites, the GPU report, the soak run and the abuse probes: scripts that measure the app and its
engine, run from the repository root (`python -m benchmarks.bench`); not part of the installed package."""
