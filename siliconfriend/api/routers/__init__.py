"""The API's routes, one router per resource; ``routes.build_api`` puts them together.

``docs.py``     ``/docs``: Swagger UI, served from here (no CDN)
``chat.py``     ``/models`` and ``/chat/completions``: OpenAI's protocol
``turns.py``    ``/turns/{id}``: a stored turn and what its reply remembered
``memories.py`` ``/memories``: list, search, export, pin, archive, restore, delete
``deps.py``     what every route receives: the service and the key's owner
"""
