"""API parity (one API, three clients): the Python client against
docs/openapi.json, with no service.

- the table of what each public method sends (``opensandbox.OPERATIONS``)
  is exactly the OpenAPI document's operations, both ways;
- every public method of ``Client`` is in the table (or sends nothing), and
  ``AsyncClient`` has each as a coroutine;
- each method, called, sends only the operations the table gives it, to
  a path and with query parameters the document describes (recorded at
  the transport, which every request goes through and which refuses one
  that names no operation);
- no request path is written in the client's source outside ``_op``'s
  operation names.

tests/recorded.py checks, after the whole suite, every request the
integration tests sent to the real service the same way.
"""

import ast
import inspect
import os
import tempfile
import unittest

from tests import harness
import opensandbox as o
from opensandbox import _http, client as client_mod

SRC = os.path.join(harness.SDK, "src", "opensandbox")
RUN = "b3:" + "ab" * 32
KEY = harness.other_key()

#: each method of the table, called with arguments enough to send its
#: request(s); every call fails (nothing listens), after sending
CALLS = {
    "health": [lambda c: c.health()],
    "openapi": [lambda c: c.openapi()],
    "metrics": [lambda c: c.metrics()],
    "host_key": [lambda c: c.host_key()],
    "create": [lambda c: c.create(grants=["fs:/data:ro"])],
    "list_sandboxes": [lambda c: c.list_sandboxes()],
    "get_sandbox": [lambda c: c.get_sandbox("sb-1")],
    "sandbox": [lambda c: c.sandbox("sb-1")],
    "remove_sandbox": [lambda c: c.remove_sandbox("sb-1")],
    "close_sandbox": [lambda c: c.close_sandbox("sb-1")],
    "suspend": [lambda c: c.suspend("sb-1")],
    "fork": [lambda c: c.fork("sb-1", 2), lambda c: c.fork("sb-1", 1, suspended=True)],
    "watch": [lambda c: c.watch("sb-1", "/w", lambda e: False), lambda c: c.watch("sb-1", "/w", print, recursive=True)],
    "expose_port": [lambda c: c.expose_port("sb-1", 8000), lambda c: c.expose_port("sb-1", 8000, ttl_seconds=60)],
    "list_ports": [lambda c: c.list_ports("sb-1")],
    "revoke_port": [lambda c: c.revoke_port("sb-1", 8000)],
    "resume": [lambda c: c.resume("sb-1"), lambda c: c.resume("sb-1", here=True)],
    "seed": [lambda c: c.seed("sb-1", "/src", "main")],
    "preservation": [lambda c: c.preservation("sb-1", {"run": "r"}, "/src", "inc")],
    "pools": [lambda c: c.pools()],
    "claim": [lambda c: c.claim("warm")],
    "exec": [lambda c: c.exec("sb-1", ["true"])],
    "exec_stream": [lambda c: c.exec_stream("sb-1", ["true"], stdin=iter([b"x"]))],
    "run": [lambda c: c.run(["true"])],
    "run_stream": [lambda c: c.run_stream(["true"])],
    "interrupt": [lambda c: c.interrupt("k" * 16)],
    "upload": [lambda c: c.upload("sb-1", "/ws/a b", b"x"), lambda c: c.upload("sb-1", "/ws/f", iter([b"x"]))],
    "download": [lambda c: c.download("sb-1", "/ws/f")],
    "list_files": [lambda c: c.list_files("sb-1", "/ws")],
    "run_report": [lambda c: c.run_report(RUN)],
    "run_bundle": [lambda c: c.run_bundle(RUN)],
    "fetch_run": [lambda c: c.fetch_run(RUN, tempfile.gettempdir())],
    "verify_run": [lambda c: c.verify_run(RUN, trusted_keys=[KEY]),
                   lambda c: c.verify_run(RUN, trust_service_key=True)],
    "records": [lambda c: c.records()],
    "fleet": [lambda c: c.fleet(["echo"], inputs=["a"])],
    "jcp_info": [lambda c: c.jcp_info()],
    "jcp_ledger": [lambda c: c.jcp_ledger()],
    "jcp_verify_ledger": [lambda c: c.jcp_verify_ledger()],
    "jcp_verify_chain": [lambda c: c.jcp_verify_chain([b"x"])],
    "jcp_admit": [lambda c: c.jcp_admit([b"x"])],
    "jcp_budgets": [lambda c: c.jcp_budgets([b"x"])],
    "jcp_revoke": [lambda c: c.jcp_revoke([b"x"], b"r")],
    "jcp_amend": [lambda c: c.jcp_amend([b"x"], b"a")],
    "jcp_policy": [lambda c: c.jcp_policy([b"x"])],
    "jcp_event": [lambda c: c.jcp_event("e")],
    "jcp_checkpoint": [lambda c: c.jcp_checkpoint([b"x"], b"c")],
}


class ParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ops = harness.openapi_operations()

    def test_the_table_is_the_openapi_both_ways(self):
        table = {op for ops in o.OPERATIONS.values() for op in ops}
        self.assertEqual(sorted(set(self.ops) - table), [],
                         "operations of docs/openapi.json no method of the Python client calls")
        self.assertEqual(sorted(table - set(self.ops)), [],
                         "operations the Python client calls that docs/openapi.json does not describe")
        # the counted ones too
        for op in ("GET /metrics", "GET /v1/openapi.json", "GET /v1/key", "GET /v1/runs/{id}/bundle"):
            self.assertIn(op, table)

    def test_every_public_method_is_in_the_table(self):
        public = {n for n, v in vars(o.Client).items() if not n.startswith("_") and callable(v)}
        self.assertEqual(sorted(public - set(o.OPERATIONS) - client_mod.LOCAL_METHODS), [],
                         "public methods of Client missing from OPERATIONS (or LOCAL_METHODS)")
        self.assertEqual(sorted(set(o.OPERATIONS) - public), [], "OPERATIONS names methods Client lacks")
        for name in o.OPERATIONS:
            self.assertTrue(inspect.iscoroutinefunction(getattr(o.AsyncClient, name)), name)
        self.assertEqual(sorted(CALLS), sorted(o.OPERATIONS), "this test calls every method of the table")

    def test_each_method_sends_what_the_table_says(self):
        sent = []

        def observe(op, method, target):
            sent.append((op, method, target))
        d = tempfile.mkdtemp()
        c = o.Client(os.path.join(d, "nothing-listens.sock"))
        _http.request_observers.append(observe)
        _http.request_observers.remove(harness._record)  # not traffic to the service: tests/recorded.py
        seen, everything = set(), []
        try:
            for name, calls in sorted(CALLS.items()):
                for call in calls:
                    del sent[:]
                    with self.subTest(method=name, call=calls.index(call)):
                        with self.assertRaises(o.ServiceUnreachable):
                            r = call(c)
                            if isinstance(r, o.ExecStream):
                                r.wait()
                        self.assertTrue(sent, "%s sent nothing" % name)
                        everything.extend(sent)
                        for op, method, target in sent:
                            self.assertIn(op, o.OPERATIONS[name], "%s sent %s, not in its row" % (name, op))
                            got, query = harness.match_request(self.ops, method, target)
                            self.assertIsNotNone(got, "%s sent %s %s, which the OpenAPI does not describe"
                                                 % (name, method, target))
                            self.assertEqual(got.op, op, "%s labelled %s as %s" % (name, target, op))
                            self.assertLessEqual(set(query), got.query, "undescribed query parameters")
                            seen.add(op)
        finally:
            _http.request_observers.remove(observe)
            _http.request_observers.append(harness._record)
            c.close()
            os.rmdir(d)
        self.assertEqual(sorted(set(self.ops) - seen), [], "operations no call sent")
        self.assertIn(("POST /v1/sandboxes/{id}/resume", "POST", "/v1/sandboxes/sb-1/resume?here=true"), everything)

    def test_resume_here_is_a_query(self):
        self.assertEqual(client_mod._op("POST /v1/sandboxes/{id}/resume", {"here": "true"}, id="sb 1").target,
                         "/v1/sandboxes/sb%201/resume?here=true")
        self.assertEqual(client_mod._op("POST /v1/sandboxes/{id}/resume", {"here": None}, id="sb-1").target,
                         "/v1/sandboxes/sb-1/resume")
        self.assertEqual(client_mod._op("GET /v1/runs/{id}/bundle", id=RUN).target, "/v1/runs/b3%3A" + "ab" * 32
                         + "/bundle")

    def test_no_request_without_an_operation(self):
        with self.assertRaises(AssertionError):
            client_mod._op("GET /v1/not-an-operation")
        with self.assertRaises(ValueError):
            client_mod._op("GET /v1/sandboxes/{id}", id="")
        with self.assertRaises(TypeError):
            client_mod._op("GET /v1/health", id="x")
        t = _http.Transport(o.Address("unix", path="/nonexistent.sock"))
        with self.assertRaises(TypeError):
            t.open("GET", "/v1/health")  # the operation is a required argument
        with self.assertRaises(ValueError):
            t.open("POST", "/v1/health", op="GET /v1/health")

    def test_no_path_is_written_outside_an_operation_name(self):
        """Every string in the client's code (docstrings aside) that looks
        like a request path is an operation name of the OpenAPI document."""
        import re
        for fn in sorted(os.listdir(SRC)):
            if not fn.endswith(".py"):
                continue
            with open(os.path.join(SRC, fn)) as f:
                tree = ast.parse(f.read(), fn)
            docstrings = set()
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                        isinstance(body[0].value, ast.Constant):
                    docstrings.add(id(body[0].value))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
                    continue
                v = node.value
                with self.subTest(file=fn, line=node.lineno, string=v[:60]):
                    self.assertFalse(re.match(r"^/(v1|metrics)\b", v), "a request path written by hand")
                    m = re.match(r"^(GET|PUT|POST|DELETE|PATCH) (/\S*)$", v)
                    if m:
                        self.assertIn(v, self.ops, "an operation the OpenAPI does not describe")


if __name__ == "__main__":
    unittest.main()
