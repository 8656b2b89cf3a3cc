"""``scrapeflow.banking.scrapers`` is both a function (the registry) and the shipped scrapers'
package: loading a scraper must not turn the package's ``scrapers`` into the subpackage."""

from __future__ import annotations

import subprocess
import sys


def test_scrapers_stays_the_registry_function_after_a_scraper_is_loaded() -> None:
    program = (
        "from scrapeflow.banking import get_scraper\n"
        "get_scraper('formbank')\n"
        "from scrapeflow.banking import scrapers\n"
        "print(sorted(scrapers()))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['apibank', 'formbank', 'legacybank', 'neobank']"
