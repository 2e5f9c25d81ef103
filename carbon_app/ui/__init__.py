"""The Gradio web app over the engine (the engine itself never imports Gradio)."""

from .app import build_app

__all__ = ["build_app"]
