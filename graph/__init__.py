"""The LangGraph state machine on three floors: `core` (what a node is given), `llm` (the LLM client), `app`
(Python API, checkpoints, CLI); the StateGraph itself (`graph.py`) and its branch decisions (`routes.py`)."""
