"""Thin wrappers of external programs: nvcc, the compiled test driver, ncu and compute-sanitizer."""
