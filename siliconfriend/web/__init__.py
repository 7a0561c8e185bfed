"""The web app without Gradio (service, accounts) and the Gradio pages that adapt it."""
