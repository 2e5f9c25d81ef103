"""The image's health check: the page answers on the port the server was told to listen on (GRADIO_SERVER_PORT),
at the address it listens on (GRADIO_SERVER_NAME; loopback where that is every interface). Exit 0 when it does."""

import os
import sys
import urllib.request

host = os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0")
host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
port = os.environ.get("GRADIO_SERVER_PORT", "7860")
try:
    urllib.request.urlopen(f"http://{'[' + host + ']' if ':' in host else host}:{port}/", timeout=4)
except OSError as exc:
    sys.exit(f"the page does not answer on port {port}: {exc}")
