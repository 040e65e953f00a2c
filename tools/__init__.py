"""Thin wrappers of external programs (nvcc, the compiled test driver, ncu, compute-sanitizer, nm), the OS
sandbox (bubblewrap) they run candidates in, and what every layer above shares: the user-facing error, safe
file writes and checks, command-line options."""
