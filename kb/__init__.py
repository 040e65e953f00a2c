"""The knowledge base: performance states, optimizations with learned scores, their Chroma index, weighted
top-k selection, the learning step's edits, prompt slices, snapshots and the shipped seed KB. The store is
`kb.store.KnowledgeBase`; each module names what it defines."""
