"""The application over the graph: the Python API, checkpointing and the `kernelblaster` command line."""
