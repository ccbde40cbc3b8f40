"""Shim: `python api_like_oai.py ...` starts the proxy like llama.cpp's original script did."""

import sys

from api_like_oai.cli import main  # the package directory beside this file wins the import

if __name__ == "__main__":
    sys.exit(main())
