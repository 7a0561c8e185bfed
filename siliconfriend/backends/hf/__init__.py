"""The local Hugging Face backend: the model files, the loader and the chat backend."""
