"""The API: an OpenAI-compatible chat endpoint whose companion remembers, the memory API, and the
per-user keys they are reached with.

``keys.py``      per-user API keys' rate limits (the keys themselves: ``accounts/keys.py``)
``service.py``   what the API does, without HTTP (a key's user, one companion turn, memory calls)
``routes.py``    the FastAPI app, mounted under ``/v1``, put together from:
``routers/``     the routes, one module per resource (chat, turns, memories, docs)
``errors.py``    OpenAI's error shape for every refusal, the body's size limit
``streaming.py`` a reply as server-sent events
``factory.build_api_service`` builds the service; ``siliconfriend serve-api`` (``cli/api.py``)
serves it alone, ``app.py`` beside the web app.

It uses the companion core, the accounts and the words; never the Gradio layer.
"""
