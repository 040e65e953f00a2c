"""The LLM client: roles and their settings, questions and answers, endpoints, structured answers, token
usage and budgets, record and replay, the human provider. It knows nothing of runs beyond `LLMSettings`."""
