//go:build linux

package native

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/executor/executortest"
	"github.com/opensubstrate/sandbox/internal/grant"
)

// listenPort is the conformance sessions' listen port: any, in a network
// namespace of their own.
const listenPort = 8000

// serveScript leaves a server on listenPort (python3, which the test
// machines have) that greets each connection, and ends once it listens.
const serveScript = `/usr/bin/python3 -c '
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000))
s.listen()
if os.fork():
    print("listening", flush=True)
    os._exit(0)
os.setsid()
os.close(1)
while True:
    c, _ = s.accept()
    c.sendall(b"hello from inside\n")
    c.close()
'`

// S1 passes the executor conformance suite, its live sessions included:
// a refusal is the egress proxy's (a net grant to one destination, a
// connection to another), in a run's log and in an exec's.
func TestConformance(t *testing.T) {
	sh := executortest.Shell{}
	const net = "net:127.0.0.1:9" // a destination the programs never reach: it gives them the proxy
	deny := executortest.Program{
		Job:    sh.Job("curl -sS -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:1/", net),
		Denied: &executortest.Denial{Kind: grant.KindNet, Target: "127.0.0.1:1"},
	}
	s := sh.Subject(testExecutor(t))
	s.Deny = deny
	s.Unavailable = func(t *testing.T) (executor.Executor, string) {
		e, err := New(Config{StateDir: t.TempDir(), Self: "/nonexistent/sandbox-s1", NoWarm: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e, "cannot find the S1 helper"
	}
	s.Session = &executortest.SessionPrograms{
		Spec: func(t *testing.T) executor.SessionSpec {
			g, err := grant.ParseArgs([]string{"fs:" + t.TempDir() + ":rw", net}, "/")
			if err != nil {
				t.Fatal(err)
			}
			return executor.SessionSpec{Grants: g, Listen: []int{listenPort}}
		},
		Start: executortest.Program{Job: sh.Job(executortest.StartScript, net)},
		Check: executortest.Program{Job: sh.Job(executortest.CheckScript, net), Stdout: executortest.CheckOutput},
		Hang:  executortest.Program{Job: sh.Job("echo ready; exec sleep 1000", net), Ready: "ready"},
		Deny:  deny,
		Listen: &executortest.ListenPrograms{Port: listenPort, Greeting: "hello from inside\n",
			Serve: executortest.Program{Job: sh.Job(serveScript, net), Stdout: "listening\n"}},
	}
	executortest.Run(t, s)
}
