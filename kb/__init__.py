"""The knowledge base: performance states, optimizations with learned scores, their index and selection."""
