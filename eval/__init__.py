"""Benchmark runs over many problems with one shared knowledge base, and the paper's metrics."""
