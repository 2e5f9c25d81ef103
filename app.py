"""Carbon Studio web app: the Hugging Face Space / Docker entry point.

    python app.py        # http://localhost:7860

Models: CARBON_MODEL (one hub id or local directory) or CARBON_MODELS (a comma
list); by default the bundled demo model and its draft. See README.md.
"""

from carbon_app.app.gradio_app import launch

if __name__ == "__main__":
    launch()
