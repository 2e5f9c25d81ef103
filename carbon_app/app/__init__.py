"""The faces over the engine: the Gradio web app (`gradio_app`), the command line (`cli`), and what
both call (`service`, `plots`). Importing this package imports no Gradio."""
