"""``python -m scrapeflow``: the same as the ``scrapeflow`` command."""

from scrapeflow.cli import main

main()
