"""The seed's import path: ``from scrapeflow.statusdata import StatusData``."""

from scrapeflow.status import Params, StatusData

__all__ = ["Params", "StatusData"]
