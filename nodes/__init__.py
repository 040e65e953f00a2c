"""Pipeline stages, one LangGraph node per module, each with its prompt text beside it."""
