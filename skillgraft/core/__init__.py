"""The model-free centre: blocks, KV states, the runtime fingerprint, questions, the gate,
sampling and the chat layout after a grafted block. No llama.cpp, no torch."""
