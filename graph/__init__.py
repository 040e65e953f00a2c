"""The LangGraph state machine: state, run context, LLM factory, graph wiring, checkpointing and the CLI."""
