"""Accounts, sessions, rate limits and API keys: what the web app and the API share.

``store.py`` is the repository interface, ``sqlite.py`` and ``postgres.py`` its two
implementations; ``users.py`` (sign-up, login, sessions, preferences), ``rate_limit.py`` and
``keys.py`` hold the logic once, over any store. Nothing here imports the web app, the API or
the factory; only ``postgres.py`` loads psycopg, and only when a database URL is configured.
"""
