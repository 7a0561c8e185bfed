"""Where memories are kept: the store interface (``base``) and one module per database
(``sqlite``: a file per user with its FAISS index; ``postgres``: one shared database with
pgvector). The bank (``memory/bank.py``) holds the logic once and talks to a store through
``base`` only."""
