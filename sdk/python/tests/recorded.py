"""Run last (tests/__init__.py's load_tests): every request the SDK sent
to the real service during this test run, recorded at the transport
(harness.SENT), is an operation of docs/openapi.json: its method, a path
of the operation's template, only query parameters the operation
describes, and labelled with that operation. Then says which operations
the integration tests never sent (under test.sh, which runs them all: none
may be left)."""

import os
import sys
import unittest

from tests import harness


class RecordedTrafficTest(unittest.TestCase):
    def test_every_request_sent_is_in_the_openapi(self):
        sent = list(harness.SENT)
        if harness._service is None:
            self.skipTest("no test sent anything to a service")
        self.assertTrue(sent)
        ops = harness.openapi_operations()
        seen = set()
        for op, method, target in sent:
            with self.subTest(request="%s %s" % (method, target)):
                got, query = harness.match_request(ops, method, target)
                self.assertIsNotNone(got, "the OpenAPI describes no %s %s" % (method, target))
                self.assertEqual(got.op, op, "a request labelled with another operation")
                self.assertLessEqual(set(query), got.query, "query parameters the OpenAPI does not describe")
                seen.add(got.op)
        never = sorted(set(ops) - seen)
        sys.stderr.write("\nrecorded: %d requests, %d of the OpenAPI's %d operations%s\n" % (
            len(sent), len(seen), len(ops), "; never sent: " + ", ".join(never) if never else ""))
        if os.environ.get("OPENSANDBOX_TEST_ALL_OPERATIONS"):  # test.sh: the whole suite ran
            self.assertEqual(never, [], "operations the integration tests never sent to the service")
