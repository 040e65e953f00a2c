"""Pipeline stages: one LangGraph node per module, named for the node, and the modules the nodes share
(candidate kernels, learning notes, profile views, prompt loading, the report); prompts in nodes/prompts/."""
