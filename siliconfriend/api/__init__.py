"""The API: an OpenAI-compatible chat endpoint whose companion remembers, the memory API, and the
per-user keys they are reached with.

``keys.py``    per-user API keys (stored hashed) and their rate limits
``service.py`` what the API does, without HTTP (a key's user, one companion turn, memory calls)
``routes.py``  the FastAPI app: OpenAI's protocol and error shapes, mounted under ``/v1``
``serve.py``   ``siliconfriend serve-api`` (``factory.build_api_service`` builds the service)

It uses the companion core, the factory and the accounts; never the Gradio layer.
"""
