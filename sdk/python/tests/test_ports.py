"""Port previews against the real service: a live S1 sandbox made with a
``listen`` port is exposed through the service's TCP listener (TLS, the
harness's self-signed certificate) once something answers on the port;
the URL reaches the port with no bearer token until it is revoked; a
listing never says the token; a revocation with none open is not found.
Without openssl the harness's service has no TCP listener, and exposing
is refused as unavailable."""

import asyncio
import datetime
import http.client
import ssl
import unittest
import urllib.parse

from tests import harness
import opensandbox as o

#: starts a web server on the sandbox's port 8000 (in its own session, so
#: that it outlives the exec) and waits until it answers
SERVE_8000 = ("cd /tmp && setsid /usr/bin/python3 -m http.server -b 127.0.0.1 8000 </dev/null >/dev/null 2>&1 & "
              "for i in $(seq 100); do /usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", "
              "8000))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1")


class PortPreviewTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = harness.service()
        cls.local = cls.svc.client()

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def fetch(self, url, headers=None):
        """GET url over https, trusting the harness's certificate and no
        other: (status, body, headers)."""
        u = urllib.parse.urlsplit(url)
        self.assertEqual(u.scheme, "https")
        ctx = ssl.create_default_context(cafile=self.svc.cert)
        conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=60)
        try:
            conn.request("GET", u.path + ("?" + u.query if u.query else ""), headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read(), r.headers
        finally:
            conn.close()

    def serve(self, sb):
        r = sb.exec(["sh", "-c", SERVE_8000])
        self.assertTrue(r.ok, "the web server in the sandbox did not start: %r" % (r,))

    def test_refused_without_a_tcp_listener(self):
        if self.svc.https:
            self.skipTest("the harness's service has a TCP listener (openssl is installed): test_preview_over_tcp")
        with self.local.create(listen=[8000]) as sb:
            with self.assertRaises(o.UnavailableError) as cm:
                sb.expose_port(8000)
            self.assertEqual(cm.exception.status, 503)
            self.assertIn("serve --listen", cm.exception.message)
            self.assertEqual(sb.list_ports(), [])
            with self.assertRaises(o.NotFoundError):
                sb.revoke_port(8000)

    def test_preview_over_tcp(self):
        if not self.svc.https:
            self.skipTest("openssl is not installed: the harness's service has no TCP listener")
        a = self.svc.tcp_client(harness.TOKEN_A)
        b = self.svc.tcp_client(harness.TOKEN_B)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        with a.create(listen=[8000]) as sb:
            self.assertEqual((sb.info.tier, sb.info.listen), ("S1", [8000]))
            # nothing answers yet: no URL is made
            with self.assertRaises(o.UnavailableError) as cm:
                sb.expose_port(8000)
            self.assertEqual(cm.exception.status, 503)
            self.assertIn("answers on port 8000", cm.exception.message)
            self.assertEqual(sb.list_ports(), [])
            self.serve(sb)
            # a port it was not made with, a ttl past a day, a port that is not a number
            with self.assertRaises(o.InvalidError) as cm:
                sb.expose_port(9000)
            self.assertIn("port 9000", cm.exception.message)
            with self.assertRaises(o.InvalidError) as cm:
                sb.expose_port(8000, ttl_seconds=o.MAX_PREVIEW_TTL + 1)
            self.assertIn("ttl_seconds", cm.exception.message)
            with self.assertRaises(TypeError):
                sb.expose_port("8000")
            # another token's caller may not expose, list or revoke it
            for call in (lambda: b.expose_port(sb.id, 8000), lambda: b.list_ports(sb.id),
                         lambda: b.revoke_port(sb.id, 8000)):
                with self.assertRaises(o.NotFoundError):
                    call()

            p = sb.expose_port(8000, ttl_seconds=600)
            self.assertIsInstance(p, o.Preview)
            self.assertEqual((p.sandbox, p.port), (sb.id, 8000))
            self.assertEqual(len(p.token), 43)
            self.assertEqual(p.url, "%s/preview/%s/" % (self.svc.https, p.token))
            self.assertRegex(p.preview, r"^b3:[0-9a-f]{64}$")
            left = p.expires_at - datetime.datetime.now(datetime.timezone.utc)
            self.assertTrue(datetime.timedelta(seconds=500) < left <= datetime.timedelta(seconds=600), left)

            # through the URL, with no bearer token
            status, body, headers = self.fetch(p.url)
            self.assertEqual(status, 200, body[:300])
            self.assertIn(b"Directory listing", body)
            self.assertIn("sandbox allow-scripts", headers.get("Content-Security-Policy", ""))
            self.assertEqual(headers.get("Referrer-Policy"), "no-referrer")

            # listed without its token or URL
            ps = sb.list_ports()
            self.assertEqual(len(ps), 1)
            self.assertEqual((ps[0].sandbox, ps[0].port, ps[0].preview, ps[0].expires), (sb.id, 8000, p.preview,
                                                                                         p.expires))
            self.assertEqual((ps[0].token, ps[0].url), ("", ""))
            self.assertEqual(a.list_ports(sb.id), ps)

            # revoked: the URL is gone; nothing left to revoke is not found
            self.assertEqual(sb.revoke_port(8000), 1)
            status, body, _ = self.fetch(p.url)
            self.assertEqual(status, 404)
            self.assertIn(b"no such preview", body)
            self.assertEqual(sb.list_ports(), [])
            with self.assertRaises(o.NotFoundError) as cm:
                a.revoke_port(sb.id, 8000)
            self.assertEqual(cm.exception.status, 404)

    def test_preview_asked_on_the_socket(self):
        """On the unix socket the URL names the service's TCP listener; the
        asyncio client's calls are the same."""
        if not self.svc.https:
            self.skipTest("openssl is not installed: the harness's service has no TCP listener")

        async def main():
            async with o.AsyncClient(self.svc.socket) as ac:
                async with await ac.create(listen=[8000]) as sb:
                    r = await sb.exec(["sh", "-c", SERVE_8000])
                    self.assertTrue(r.ok, r)
                    p = await sb.expose_port(8000)
                    self.assertEqual(p.url, "%s/preview/%s/" % (self.svc.https, p.token))
                    left = p.expires_at - datetime.datetime.now(datetime.timezone.utc)
                    self.assertTrue(datetime.timedelta(seconds=3500) < left <= datetime.timedelta(hours=1), left)
                    self.assertEqual([x.preview for x in await ac.list_ports(sb.id)], [p.preview])
                    status, _, _ = await asyncio.get_running_loop().run_in_executor(None, self.fetch, p.url)
                    self.assertEqual(status, 200)
                    self.assertEqual(await ac.revoke_port(sb.id, 8000), 1)
                    self.assertEqual(await sb.list_ports(), [])
                    with self.assertRaises(o.NotFoundError):
                        await sb.revoke_port(8000)
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
