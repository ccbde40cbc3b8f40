import sys

from .member import main

sys.exit(main(sys.argv[1:]))
