package vm

import (
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
)

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

func tcpLine(local, state string) string {
	return "   0: " + local + " 00000000:0000 " + state + " 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n"
}

// ListeningOn reads a guest's listening sockets on a port as the kernel
// lists them: every address and the guest's own are reachable through
// the forwarding, the loopback is not, other states and ports are not
// listening on it, and a line it cannot read is an error naming it.
func TestListeningOn(t *testing.T) {
	for _, c := range []struct {
		name      string
		tcp, tcp6 string
		want      Listening
		err       string
	}{
		{name: "nothing", tcp: tcpHeader, tcp6: tcpHeader},
		{name: "every IPv4 address", tcp: tcpHeader + tcpLine("00000000:1F40", "0A"), want: Listening{Reachable: true}},
		{name: "the guest's address", tcp: tcpHeader + tcpLine("0F02000A:1F40", "0A"), want: Listening{Reachable: true}},
		{name: "the loopback", tcp: tcpHeader + tcpLine("0100007F:1F40", "0A"), want: Listening{Loopback: true}},
		{name: "another port", tcp: tcpHeader + tcpLine("00000000:1F41", "0A")},
		{name: "a connection, not a listener", tcp: tcpHeader + tcpLine("0F02000A:1F40", "01")},
		{name: "every IPv6 address", tcp6: tcpHeader + tcpLine("00000000000000000000000000000000:1F40", "0A"), want: Listening{Reachable: true}},
		{name: "the guest's address, mapped", tcp6: tcpHeader + tcpLine("0000000000000000FFFF00000F02000A:1F40", "0A"), want: Listening{Reachable: true}},
		{name: "the IPv6 loopback", tcp6: tcpHeader + tcpLine("00000000000000000000000001000000:1F40", "0A"), want: Listening{Loopback: true}},
		{name: "no IPv6", tcp: tcpHeader + tcpLine("00000000:1F40", "0A"), want: Listening{Reachable: true}},
		{name: "a short line", tcp: tcpHeader + "   0: 00000000:1F40\n", err: "/proc/net/tcp line 2: 2 fields"},
		{name: "not hex", tcp: tcpHeader + tcpLine("zz000000:1F40", "0A"), err: "/proc/net/tcp line 2: local address"},
		{name: "an IPv6 address in the IPv4 table", tcp: tcpHeader + tcpLine("00000000000000000000000000000000:1F40", "0A"), err: "want 8 hex digits"},
		{name: "a port of 5 digits", tcp: tcpHeader + tcpLine("00000000:11F40", "0A"), err: "line 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tcp6 []byte
			if c.tcp6 != "" {
				tcp6 = []byte(c.tcp6)
			}
			got, err := ListeningOn([]byte(c.tcp), tcp6, 8000)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("%+v, %v: want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("%+v, %v: want %+v", got, err, c.want)
			}
		})
	}
}

// The byte order ListeningOn reads addresses in is the kernel's: this
// machine's own listeners, read from its /proc/net/tcp, are found.
func TestListeningOnThisKernel(t *testing.T) {
	for _, c := range []struct {
		addr string
		want Listening
	}{{"0.0.0.0:0", Listening{Reachable: true}}, {"127.0.0.1:0", Listening{Loopback: true}}} {
		ln, err := net.Listen("tcp4", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		tcp, err := os.ReadFile("/proc/net/tcp")
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ListeningOn(tcp, nil, port); err != nil || got != c.want {
			t.Fatalf("a listener on %s (port %d): %+v, %v; want %+v", c.addr, port, got, err, c.want)
		}
	}
}

func FuzzListeningOn(f *testing.F) {
	f.Add([]byte(tcpHeader+tcpLine("0F02000A:1F40", "0A")), []byte(tcpHeader+tcpLine("00000000000000000000000001000000:1F40", "0A")), 8000)
	f.Add([]byte("\n\n  \n"), []byte(nil), 0)
	f.Add([]byte(tcpHeader+"0: :: 0 0A"), []byte("x\n0: 0:0 0 0A"), 65535)
	f.Fuzz(func(t *testing.T, tcp, tcp6 []byte, port int) {
		ListeningOn(tcp, tcp6, port) // an error or an answer, never a panic
	})
}

// A table of nothing but newlines, at the bound, is read without
// holding more than a line: a guest cannot make the host allocate by it.
func TestListeningOnAllocatesNoLines(t *testing.T) {
	tcp := []byte(strings.Repeat("\n", MaxNetTable))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ListeningOn(tcp, tcp, 8000)
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Fatalf("%d bytes allocated to read %d empty lines", n, 2*MaxNetTable)
	}
}
