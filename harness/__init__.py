"""GPU evaluation of a CUDA candidate against a PyTorch problem: load, verify, time, profile, roofline.

No LLM and no LangGraph here: torch, numpy, pydantic and the CUDA toolkit only.
"""
