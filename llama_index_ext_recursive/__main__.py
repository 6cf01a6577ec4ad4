import sys

from llama_index_ext_recursive.cli import main

sys.exit(main())
