package audit

import (
	"errors"
	"fmt"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		typ    uint16
		text   string
		serial uint64
		want   map[string]string
	}{
		// Records as this host's kernel wrote them (6.18, Landlock ABI 7).
		{TypeLandlockAccess, `audit(1796101831.145:5): domain=16951c4d7 blockers=fs.make_fifo path="/dev" dev="tmpfs" ino=1`, 5,
			map[string]string{"domain": "16951c4d7", "blockers": "fs.make_fifo", "path": "/dev", "dev": "tmpfs", "ino": "1"}},
		{TypeLandlockAccess, `audit(1796101831.105:3): domain=16951c4d4 blockers=net.connect_tcp daddr=1.1.1.1 dest=53`, 3,
			map[string]string{"blockers": "net.connect_tcp", "daddr": "1.1.1.1", "dest": "53"}},
		{TypeLandlockDomain, `audit(1796101831.105:3): domain=16951c4d4 status=allocated mode=enforcing pid=4308 uid=65534 exe="/tmp/sandbox-s1" comm="sandbox-s1"`, 3,
			map[string]string{"status": "allocated", "pid": "4308", "exe": "/tmp/sandbox-s1"}},
		{TypeLandlockDomain, `audit(1796101831.157:7): domain=16951c4d4 status=deallocated denials=2`, 7,
			map[string]string{"status": "deallocated", "denials": "2"}},
		// An untrusted string with a space is hex, unquoted.
		{TypeLandlockAccess, `audit(1.2:9): domain=1 blockers=fs.write_file,fs.truncate path=2F746D702F6120622E747874 dev="vda"`, 9,
			map[string]string{"blockers": "fs.write_file,fs.truncate", "path": "/tmp/a b.txt"}},
		{TypeUser, `audit(1.2:10): pid=1 uid=0 auid=4294967295 ses=4294967295 msg='sandbox: run ended, fence 00ff'`, 10,
			map[string]string{"pid": "1", "msg": "sandbox: run ended, fence 00ff"}},
		{TypeLandlockAccess, "audit(1.2:11): domain=1 blockers=scope.signal opid=77 ocomm=\"sleep\"\x00", 11,
			map[string]string{"opid": "77", "ocomm": "sleep"}},
	}
	for _, tc := range tests {
		r, err := Parse(tc.typ, []byte(tc.text))
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		if r.Serial != tc.serial || r.Type != tc.typ {
			t.Errorf("%s: serial %d type %d", tc.text, r.Serial, r.Type)
		}
		for k, v := range tc.want {
			if r.Fields[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.text, k, r.Fields[k], v)
			}
		}
	}
	for _, bad := range []string{
		"", "domain=1", "audit(1.2): x=1", "audit(1.2:x): a=1", "audit(1.2:3): a", `audit(1.2:3): path="/unterminated`,
		"audit(1.2:3 a=1", `audit(1.2:3): "a"=1`,
	} {
		if _, err := Parse(TypeLandlockAccess, []byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", bad, err)
		}
	}
}

// TestLandlockCollector: denials are sorted to the domain a pid created,
// other domains (another run, the tier probe) are left out, the kernel's
// count at a domain's end is kept, and past MaxRecords denials are only
// counted.
func TestLandlockCollector(t *testing.T) {
	l := NewLandlock()
	add := func(typ uint16, text string) {
		r, err := Parse(typ, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		l.Add(r)
	}
	add(TypeLandlockAccess, `audit(1.0:1): domain=aa blockers=net.connect_tcp daddr=1.1.1.1 dest=53`)
	add(TypeLandlockDomain, `audit(1.0:1): domain=aa status=allocated mode=enforcing pid=10 uid=1`)
	add(TypeLandlockAccess, `audit(1.0:2): domain=bb blockers=fs.make_reg path="/dev" dev="tmpfs" ino=1`)
	add(TypeLandlockDomain, `audit(1.0:2): domain=bb status=allocated mode=enforcing pid=20 uid=1`)
	add(TypeLandlockAccess, `audit(1.0:3): domain=bb blockers=scope.signal opid=5 ocomm="init"`)
	add(TypeLandlockAccess, `audit(1.0:4): domain=bb blockers=net.connect_tcp daddr=::1 dest=80`)
	rep := l.Of(20)
	if len(rep.Denials) != 3 || rep.Denials[0].Object != "/dev" || rep.Denials[0].Blockers[0] != "fs.make_reg" ||
		rep.Denials[1].Object != "pid 5 (init)" || rep.Denials[2].Object != "[::1]:80" || rep.Ended {
		t.Fatalf("%+v", rep)
	}
	add(TypeLandlockDomain, `audit(1.0:5): domain=bb status=deallocated denials=3`)
	if rep := l.Of(20); !rep.Ended || rep.Reported != 3 {
		t.Fatalf("%+v", rep)
	}
	if rep := l.Of(30); len(rep.Denials) != 0 || !rep.Ended {
		t.Fatalf("pid 30 created no domain: %+v", rep)
	}
	// Identical in a row: one denial, counted.
	for range 3 * MaxRecords {
		add(TypeLandlockAccess, `audit(1.0:6): domain=aa blockers=fs.read_file path="/x"`)
	}
	if rep := l.Of(10); len(rep.Denials) != 2 || rep.Denials[1].Count != 3*MaxRecords || rep.Unlisted != 0 {
		t.Fatalf("identical denials: %+v", rep)
	}
	// Distinct: kept up to the bound, then counted.
	for i := range MaxRecords {
		add(TypeLandlockAccess, fmt.Sprintf(`audit(1.0:7): domain=aa blockers=fs.read_file path="/x%d"`, i))
	}
	if rep := l.Of(10); len(rep.Denials) != MaxRecords-3 || rep.Unlisted != 5 {
		t.Fatalf("bounded: %d kept, %d unlisted", len(rep.Denials), rep.Unlisted)
	}
}

// FuzzParse: hostile record text never panics, and what parses keeps at
// most maxFields fields.
func FuzzParse(f *testing.F) {
	f.Add(uint16(TypeLandlockAccess), []byte(`audit(1.2:9): domain=1 blockers=fs.write_file path=2F746D70 dev="vda"`))
	f.Add(uint16(TypeUser), []byte(`audit(1.2:10): pid=1 msg='x y'`))
	f.Add(uint16(TypeLandlockDomain), []byte(`audit(1.2:3): domain=1 status=allocated pid=4`))
	f.Fuzz(func(t *testing.T, typ uint16, b []byte) {
		r, err := Parse(typ, b)
		if err == nil && len(r.Fields) > maxFields {
			t.Fatalf("%d fields", len(r.Fields))
		}
		l := NewLandlock()
		l.Add(r)
		l.Of(0)
	})
}

// TestLandlockCollectorByUID: the domains processes of one (host) user
// made, whichever processes: an S1 run's, whose host id is its own.
func TestLandlockCollectorByUID(t *testing.T) {
	l := NewLandlock()
	add := func(typ uint16, text string) {
		r, err := Parse(typ, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		l.Add(r)
	}
	add(TypeLandlockDomain, `audit(1.0:1): domain=aa status=allocated mode=enforcing pid=10 uid=1`)
	add(TypeLandlockAccess, `audit(1.0:1): domain=aa blockers=net.connect_tcp daddr=1.1.1.1 dest=53`)
	add(TypeLandlockDomain, `audit(1.0:5): domain=cc status=allocated mode=enforcing pid=40 uid=1879048200`)
	add(TypeLandlockAccess, `audit(1.0:5): domain=cc blockers=fs.write_file path="/etc/x"`)
	add(TypeLandlockDomain, `audit(1.0:5): domain=dd status=allocated mode=enforcing pid=41 uid=1879048200`)
	add(TypeLandlockAccess, `audit(1.0:5): domain=dd blockers=fs.read_file path="/y"`)
	if rep := l.OfUID(1879048200); len(rep.Denials) != 2 || rep.Ended {
		t.Fatalf("the domains of uid 1879048200: %+v", rep)
	}
	if rep := l.OfUID(1); len(rep.Denials) != 1 {
		t.Fatalf("the domains of uid 1: %+v", rep)
	}
	if rep := l.OfUID(2); len(rep.Denials) != 0 || !rep.Ended {
		t.Fatalf("uid 2 created no domain: %+v", rep)
	}
	add(TypeLandlockDomain, `audit(1.0:6): domain=cc status=deallocated denials=1`)
	add(TypeLandlockDomain, `audit(1.0:6): domain=dd status=deallocated denials=1`)
	if rep := l.OfUID(1879048200); !rep.Ended || rep.Reported != 2 {
		t.Fatalf("ended: %+v", rep)
	}
}
