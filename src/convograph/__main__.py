"""``python -m convograph`` is the same as ``convograph``."""

from convograph.cli import main

main()
