"""The SDK's tests. Discovered from here, they run in module order, then
tests/recorded.py (what was sent to the service, against the OpenAPI)."""

import os
import unittest


def load_tests(loader, standard_tests, pattern):
    here = os.path.dirname(os.path.abspath(__file__))
    suite = unittest.TestSuite()
    suite.addTests(loader.discover(start_dir=here, pattern=pattern or "test*.py",
                                   top_level_dir=os.path.dirname(here)))
    from tests import recorded
    suite.addTests(loader.loadTestsFromModule(recorded))
    return suite
