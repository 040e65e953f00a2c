"""What a node is given: the graph's state, the run context, run files, services, progress notes, the GPU
pool, LLM costs and the checks before a run. Nodes import this floor and `graph.llm`, nothing above."""
