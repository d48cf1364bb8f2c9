import os
import sys

# Shared helpers (negative controls) live beside the test folders.
sys.path.insert(0, os.path.dirname(__file__))
